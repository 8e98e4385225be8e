// The staff's grading page (grader/classroom/staff.py serves it).  A student's
// text only ever goes in through textContent: never as markup.
"use strict";

const state = {questions: [], q: null, at: 0, showWho: false, pending: null};
// Keys are handled one after another: a save must see the version the last one returned.
let queue = Promise.resolve();
const later = (work) => { queue = queue.then(work).catch((e) => say(String(e))); };
const $ = (id) => document.getElementById(id);

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

function say(text) { $("status").textContent = text; }
const points = (n) => `${n} point${n === 1 ? "" : "s"}`;

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const res = await fetch(path, opts);
  const data = await res.json().catch(() => ({error: "the server's answer is not JSON."}));
  return {status: res.status, data};
}

async function loadQuestions() {
  const {status, data} = await api("api/questions");
  if (status !== 200) { say(data.error); return; }
  state.questions = data.questions;
  $("who").textContent = "grading as " + data.grader;
  const list = $("questions");
  list.replaceChildren();
  for (const q of data.questions) {
    const b = el("button", "", {type: "button", "data-q": q.question});
    b.append(el("span", q.question), el("span", ` ${q.graded}/${q.answers} answers graded`,
                                         {class: "progress"}));
    if (state.q && state.q.question === q.question) b.setAttribute("aria-current", "true");
    b.addEventListener("click", () => openQuestion(q.question, 0));
    const li = el("li"); li.append(b); list.append(li);
  }
}

async function openQuestion(name, at) {
  const {status, data} = await api("api/question?q=" + encodeURIComponent(name));
  if (status !== 200) { say(data.error); return; }
  state.q = data;
  state.at = Math.max(0, Math.min(at, data.groups.length - 1));
  $("grading").hidden = false;
  $("qname").textContent = `${data.question} (${data.exercise}, ${data.points_possible} points)`;
  $("qtext").textContent = data.text;
  showGroup();
  await loadQuestions();
}

function group() { return state.q.groups[state.at]; }

function showGroup() {
  const g = group(), q = state.q;
  const graded = q.groups.filter((x) => x.graded).length;
  $("place").textContent = `Answer ${state.at + 1} of ${q.groups.length}` +
    (g.members.length > 1 ? ` (the same text from ${g.members.length} students)` : "") +
    ` · ${graded} of ${q.groups.length} graded` +
    (g.graded ? ` · this one: ${points(g.points)} by ${g.grader}` : " · this one: not graded");
  $("identity").textContent = "Student(s): " + g.members.join(", ");
  $("identity").hidden = !state.showWho;
  $("answer").textContent = g.answer || "(no answer)";
  $("comment").value = g.comment || "";
  const list = $("rubric");
  list.replaceChildren();
  for (const item of q.rubric) {
    const on = g.items.includes(item.position);
    const b = el("button", `${item.position}. ${item.text}`,
                 {type: "button", "aria-pressed": String(on), "data-item": item.position});
    b.addEventListener("click", () => toggle(item.position));
    const pts = el("input", undefined, {type: "number", min: "0", step: "0.5",
                                        "aria-label": `points of item ${item.position}`});
    pts.value = item.points;
    pts.addEventListener("change", () => setItemPoints(item.position, pts.value));
    const li = el("li"); li.append(b, pts, el("span", " pt")); list.append(li);
  }
  $("score").textContent = g.graded ? `(${g.points} of ${points(q.points_possible)})` : "";
  $("conflict").hidden = true;
}

function toggle(position) {
  const g = group();
  const items = g.items.includes(position) ? g.items.filter((i) => i !== position)
                                           : [...g.items, position];
  return save(items, $("comment").value, false);
}

async function save(items, comment, replace) {
  const g = group(), q = state.q;
  const body = {question: q.question, submissions: g.members, items, comment,
                seen: g.versions, replace};
  const {status, data} = await api("api/mark", body);
  if (status === 200 && data.stale) {
    state.pending = body;
    $("conflict-text").textContent = data.stale;
    $("conflict").hidden = false;
    $("replace").focus();
    return;
  }
  if (status !== 200) { say(data.error); return; }
  Object.assign(g.versions, data.versions);
  const rubric = Object.fromEntries(q.rubric.map((i) => [i.position, i.points]));
  Object.assign(g, {items: [...items].sort((a, b) => a - b), comment, graded: true,
                    grader: $("who").textContent.replace("grading as ", ""),
                    points: Math.min(q.points_possible,
                                     items.reduce((s, i) => s + rubric[i], 0))});
  say(`saved: ${points(g.points)} for ${g.members.length} answer(s)`);
  showGroup();
  await loadQuestions();
}

async function resolve(replace) {
  const body = state.pending;
  state.pending = null;
  $("conflict").hidden = true;
  if (replace) {
    const {status, data} = await api("api/mark", {...body, replace: true});
    if (status !== 200 || data.stale) { say(data.error || data.stale); return; }
    say("replaced theirs with yours");
  } else {
    say("kept theirs");
  }
  await openQuestion(state.q.question, state.at);
  $("answer").focus();
}

async function setItemPoints(position, value) {
  const {status, data} = await api("api/rubric", {question: state.q.question, position,
                                                  points: value});
  if (status !== 200) { say(data.error); return; }
  say(`item ${position} changed: ${data.rescored} answer(s) scored again`);
  await openQuestion(state.q.question, state.at);
}

function step(delta) {
  if (!state.q) return;
  state.at = (state.at + delta + state.q.groups.length) % state.q.groups.length;
  showGroup();
}

function nextUngraded() {
  if (!state.q) return;
  const n = state.q.groups.length;
  for (let d = 1; d <= n; d++) {
    const i = (state.at + d) % n;
    if (!state.q.groups[i].graded) { state.at = i; showGroup(); return; }
  }
  say(`every answer of ${state.q.question} is graded`);
}

async function writeFiles() {
  say("writing the class's files...");
  const {status, data} = await api("api/write", {});
  say(status === 200 ? `wrote ${data.written.length} files` : data.error);
}

function onKey(ev) {
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const action = keyAction(ev);
  if (action) { ev.preventDefault(); later(action); }
}

function keyAction(ev) {
  if (!$("conflict").hidden || state.pending) {
    if (ev.key === "r") return () => resolve(true);
    if (ev.key === "k" || ev.key === "Escape") return () => resolve(false);
    return null;
  }
  const target = ev.target;
  if (target.id === "comment") {
    if (ev.key === "Enter" && !ev.shiftKey) {
      const text = target.value;
      target.blur();
      return () => save(group().items, text, false);
    }
    if (ev.key === "Escape") target.blur();
    return null;
  }
  if (target.tagName === "INPUT" || target.tagName === "TEXTAREA") return null;
  if (ev.key === "w") return writeFiles;
  if (ev.key === "q") return () => { const b = document.querySelector("#questions button"); if (b) b.focus(); };
  if (!state.q) return null;
  const digit = "0123456789".indexOf(ev.key);
  if (digit === 0) return () => save([], $("comment").value, false);
  if (digit > 0 && state.q.rubric.some((i) => i.position === digit)) return () => toggle(digit);
  if (ev.key === "c") return () => $("comment").focus();
  if (ev.key === "n") return nextUngraded;
  if (ev.key === "j") return () => step(1);
  if (ev.key === "k") return () => step(-1);
  if (ev.key === "i") return () => { state.showWho = !state.showWho; $("identity").hidden = !state.showWho; };
  return null;
}

document.addEventListener("keydown", onKey);
document.addEventListener("DOMContentLoaded", () => {
  $("write").addEventListener("click", writeFiles);
  $("replace").addEventListener("click", () => resolve(true));
  $("keep").addEventListener("click", () => resolve(false));
  loadQuestions();
});
