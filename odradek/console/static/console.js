// Odradek console: the live tail (server-sent events) and nothing else the pages cannot do without.
"use strict";

function cell(text, pre) {
  const td = document.createElement("td");
  if (pre) {
    const p = document.createElement("pre");
    p.textContent = text;
    td.appendChild(p);
  } else {
    td.textContent = text;
  }
  return td;
}

function startTail(button) {
  const body = document.querySelector("#tail tbody");
  const status = document.getElementById("tail-status");
  const source = new EventSource(button.dataset.url);
  const limit = 500;
  source.onopen = () => { status.textContent = "following"; };
  source.onerror = () => { status.textContent = "reconnecting…"; };
  source.addEventListener("failure", (e) => {
    source.close();
    status.textContent = "stopped: " + JSON.parse(e.data).error;
  });
  source.onmessage = (e) => {
    const m = JSON.parse(e.data);
    const tr = document.createElement("tr");
    tr.dataset.offset = m.offset;
    tr.dataset.partition = m.partition;
    tr.append(cell(m.partition), cell(m.offset), cell(new Date(m.timestamp).toISOString()),
      cell(m.key, true), cell(m.value, true), cell(m.headers.map(([k, v]) => k + ": " + v).join("\n"), true));
    body.prepend(tr);
    while (body.rows.length > limit) body.deleteRow(-1);
  };
  button.textContent = "Stop following";
  button.onclick = () => {
    source.close();
    status.textContent = "stopped";
    button.textContent = "Follow new messages";
    button.onclick = () => startTail(button);
  };
}

document.addEventListener("DOMContentLoaded", () => {
  const tail = document.getElementById("tail-toggle");
  if (tail) tail.onclick = () => startTail(tail);
});
