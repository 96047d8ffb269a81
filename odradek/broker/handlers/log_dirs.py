"""DescribeLogDirs (v1-4): each of this broker's ``log.dirs`` with the partitions it holds (size in bytes, offset
lag = how far the log end is behind the high watermark), and from v4 the file system's total and usable bytes,
as Kafka's broker answers it (``kafka-log-dirs.sh``, ``odradek log-dirs``).

``topics`` null asks for every partition; otherwise only those listed (unknown ones are left out, as Kafka
does); a failed directory (``log_manager.offline_dirs``) is listed with KAFKA_STORAGE_ERROR and no partitions,
as Kafka does. The request needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED and no directories, as
Kafka answers). Sizes come from the segments' known sizes and one ``statvfs`` per directory: no scan of the files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from odradek.broker.authorization import cluster_error
from odradek.broker.context import RequestContext
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation


async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if denied := cluster_error(ctx, AclOperation.DESCRIBE):
        return {"throttle_time": 0, "error_code": denied, "results": []}
    lm = ctx.broker.log_manager
    wanted = None if request.topics is None else {(t.topic, int(p)) for t in request.topics for p in t.partitions}
    by_dir: dict[str, dict[str, list[dict[str, Any]]]] = {str(d): {} for d in lm.log_dirs}
    for lg in lm.logs():
        if wanted is not None and (lg.topic, lg.partition) not in wanted:
            continue
        d = lm.dir_of(lg.topic, lg.partition)
        if d is None:
            continue
        by_dir.setdefault(str(d), {}).setdefault(lg.topic, []).append({
            "partition_index": lg.partition, "partition_size": lg.size,
            "offset_lag": max(0, lg.high_watermark - lg.next_offset), "is_future_key": False})
    results = []
    for d, topics in by_dir.items():
        if Path(d) in lm.offline_dirs:  # a failed directory: Kafka reports it with no partitions
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": d, "total_bytes": -1,
                            "usable_bytes": -1, "topics": []})
            continue
        try:
            st = os.statvfs(d)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            code = ErrorCode.NONE
        except OSError:
            total = usable = -1
            code = ErrorCode.KAFKA_STORAGE_ERROR
        results.append({"error_code": code, "log_dir": d, "total_bytes": total, "usable_bytes": usable,
                        "topics": [{"name": t, "partitions": sorted(ps, key=lambda p: p["partition_index"])}
                                   for t, ps in sorted(topics.items())]})
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "results": results}
