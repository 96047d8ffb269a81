"""Log compaction (Kafka's log cleaner): the offset map, record filtering, and (next) the cleaning of segment
groups, the crash-safe swap of cleaned segments, and the scheduler that picks the dirtiest log."""
