// mr-judge view: the rows are data (the JSON block above); this builds a page of them at a time as they
// scroll into view, and a row's detail only when it is opened, so a 10,000-item run opens at once.
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("view-data").textContent);
  const PAGE = 100;
  const SERVED = location.protocol === "http:" || location.protocol === "https:";
  const $ = (id) => document.getElementById(id);
  let section = null;
  let filtered = [];
  let shown = 0;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  const num = (x, digits = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
  const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%");
  const letter = (i) => String.fromCharCode(65 + i);
  const slug = (s) => String(s).toLowerCase().replace(/→/g, " to ").replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "");

  // -- images ------------------------------------------------------------------------------------------
  function picture(image, big) {
    if (!image) return el("div", { class: "placeholder", text: "no image" });
    const thumb = DATA.thumbs[image.key];
    if (!thumb) {
      const why = DATA.missing[image.key] || "not read";
      if (image.label) return el("div", { class: "placeholder", title: image.key }, image.label);
      return el("div", { class: "placeholder", title: `${image.path || image.key}: ${why}` },
        `missing: ${image.path || image.key}`);
    }
    const img = el("img", { class: big ? "" : "thumb", src: thumb, alt: image.path || image.key, loading: "lazy" });
    if (!big) return img; // in a row's summary a click opens the row; the detail links the original
    const href = SERVED ? "/original?key=" + encodeURIComponent(image.key) : image.href;
    return href ? el("a", { href: href, target: "_blank", rel: "noopener", title: "open the original" }, img) : img;
  }

  // -- the header's figures ----------------------------------------------------------------------------
  function accuracyCard(title, table) {
    if (!table || !table.length) return null;
    const rows = table.map((r) => el("tr", {},
      el("td", { text: r.name }), el("td", { text: r.n }), el("td", { text: pct(r.accuracy) }),
      el("td", { class: "meta", text: r.low === null ? "" : `${pct(r.low)} … ${pct(r.high)}` }),
      el("td", {}, el("span", { class: "bar", style: `width:${Math.round(60 * (r.accuracy || 0))}px` }))));
    return el("div", { class: "card" }, el("h3", { text: title }),
      el("table", {}, el("tr", {}, el("th", { text: "" }), el("th", { text: "n" }), el("th", { text: "accuracy" }),
        el("th", { text: "95% interval" }), el("th", { text: "" })), rows));
  }

  function countsCard(title, counts, total) {
    const rows = Object.entries(counts || {}).sort((a, b) => b[1] - a[1]).map(([name, n]) =>
      el("tr", {}, el("td", {}, el("span", { class: "chip " + slug(name), text: name })), el("td", { text: n }),
        el("td", { class: "meta", text: total ? pct(n / total) : "" })));
    return el("div", { class: "card" }, el("h3", { text: title }), el("table", {}, rows));
  }

  function positionCard(position) {
    if (!position || !position.calls) return null;
    const parsed = Object.values(position.picks_per_slot).reduce((a, b) => a + b, 0);
    const rows = Object.entries(position.picks_per_slot).map(([slot, n]) => el("tr", {},
      el("td", { text: slot }), el("td", { text: n }), el("td", { text: pct(n / parsed) }),
      el("td", {}, el("span", { class: "bar", style: `width:${Math.round(60 * n / parsed)}px` }))));
    return el("div", { class: "card" }, el("h3", { text: "position bias" }),
      el("table", {}, el("tr", {}, el("th", { text: "slot" }), el("th", { text: "picks" }), el("th", { text: "share" })), rows),
      el("div", { class: "kv" }, "consistent across orders: ", el("b", { text: pct(position.consistency) }),
        ` of ${position.consistency_n}`, position.unparsed_calls ? ` · unparsed calls: ${position.unparsed_calls}` : ""));
  }

  function auditCard(header) {
    const rows = [["all", header.overall], ...header.windows.map((w) => ["window " + w.window, w])].map(([name, f]) =>
      el("tr", {}, el("td", { text: name }), el("td", { text: f.n }), el("td", { text: num(f.judge_mean) }),
        el("td", { text: num(f.gold_mean) }), el("td", { text: pct(f.overpay) }), el("td", { text: pct(f.underpay) })));
    return el("div", { class: "card" }, el("h3", { text: "what the judge paid, against the gold" }),
      el("table", {}, el("tr", {}, ...["", "n", "judge", "gold", "overpay", "underpay"].map((t) => el("th", { text: t }))), rows));
  }

  function renderHeader() {
    const box = $("header");
    box.replaceChildren();
    const h = section.header || {};
    const about = el("div", { class: "card" }, el("h3", { text: section.kind === "compare" ? "comparison" : "run" }),
      el("div", { class: "kv" }, el("b", { text: section.name }), section.benchmark ? ` · ${section.benchmark}` : "",
        ` · ${section.rows.length} items`),
      el("div", { class: "kv", text: section.source }));
    if (section.skipped) {
      about.append(el("details", { class: "problems" }, el("summary", { text: `${section.skipped} bad rows skipped` }),
        el("ul", {}, section.problems.map((p) => el("li", { text: p })))));
    }
    if (h.mean_tokens) {
      about.append(el("div", { class: "kv" }, "mean tokens: prompt ", el("b", { text: num(h.mean_tokens.prompt_tokens, 0) }),
        ", completion ", el("b", { text: num(h.mean_tokens.completion_tokens, 0) })));
    }
    box.append(about);
    if (section.kind === "compare") {
      box.append(countsCard(`${h.names[0]} → ${h.names[1]}`, h.changes, h.n));
      if (h.only_a || h.only_b) box.append(el("div", { class: "card kv", text: `only in A: ${h.only_a} · only in B: ${h.only_b}` }));
    } else if (section.kind === "audit") {
      box.append(countsCard("samples", h.statuses, h.n), auditCard(h));
    } else {
      box.append(countsCard("status", h.statuses, h.n));
      for (const card of [accuracyCard("accuracy by category", h.accuracy), accuracyCard("by subset", h.accuracy_by_subset),
        accuracyCard("by flaw", h.accuracy_by_flaw), positionCard(h.position)]) if (card) box.append(card);
    }
  }

  // -- filters -----------------------------------------------------------------------------------------
  function fill(id, values) {
    const select = $(id);
    const distinct = [...new Set(values.filter((v) => v !== "" && v !== null && v !== undefined))].sort();
    select.replaceChildren(el("option", { value: "", text: "all" }), ...distinct.map((v) => el("option", { value: v, text: v })));
    select.parentElement.style.display = distinct.length ? "" : "none";
  }

  function consistency(row) {
    const c = section.kind === "compare" ? row.b.consistent : row.consistent;
    return c === true ? "consistent" : c === false ? "inconsistent" : "";
  }

  function searchText(row) {
    if (row._text === undefined) {
      const parts = [row.id, row.question, row.completion, row.reasoning, row.reference];
      for (const r of section.kind === "compare" ? [row.a, row.b] : [row]) {
        parts.push(...(r.candidates || []));
        for (const call of r.calls || []) parts.push(call.think, call.raw);
      }
      row._text = parts.filter(Boolean).join("\n").toLowerCase();
    }
    return row._text;
  }

  function applyFilters() {
    const want = { status: $("f-status").value, category: $("f-category").value, subset: $("f-subset").value, flaw: $("f-flaw").value };
    const orders = $("f-orders").value;
    const query = $("f-search").value.trim().toLowerCase();
    filtered = section.rows.filter((row) =>
      (!want.status || row.status === want.status) && (!want.category || row.category === want.category) &&
      (!want.subset || row.subset === want.subset) && (!want.flaw || row.flaw === want.flaw) &&
      (!orders || consistency(row) === orders) && (!query || searchText(row).includes(query)));
    const sort = $("f-sort").value;
    if (sort !== "file") {
      const sign = sort === "conf-asc" ? 1 : -1;
      filtered = filtered.slice().sort((a, b) => {
        if (a.confidence === null || a.confidence === undefined) return 1;
        if (b.confidence === null || b.confidence === undefined) return -1;
        return sign * (a.confidence - b.confidence);
      });
    }
    shown = 0;
    $("rows").replaceChildren();
    if (!filtered.length) $("rows").append(el("div", { class: "empty", text: "no item matches these filters" }));
    renderMore();
  }

  // -- rows --------------------------------------------------------------------------------------------
  function renderMore() {
    const box = $("rows");
    const end = Math.min(filtered.length, shown + PAGE);
    const fragment = document.createDocumentFragment();
    for (let i = shown; i < end; i++) fragment.append(rowElement(filtered[i]));
    box.append(fragment);
    shown = end;
    $("shown").textContent = `showing ${shown} of ${filtered.length} (${section.rows.length} in all)`;
    requestAnimationFrame(fillScreen);
  }

  // The observer reports changes only: a sentinel still in reach after a page was added (a fast scroll, a tall
  // screen) would wait for the next scroll. Keep adding until it is out of reach.
  function fillScreen() {
    const reach = $("sentinel").getBoundingClientRect().top - innerHeight;
    if (reach < 600 && shown < filtered.length) renderMore();
  }

  function summaryLine(row) {
    const right = [];
    if (section.kind === "audit") {
      right.push(el("span", { class: "meta", text: `paid ${num(row.reward, 2)} · gold ${num(row.gold, 2)}` }));
    } else if (section.kind === "compare") {
      right.push(el("span", { class: "meta", text: `pick ${pickName(row.a.pick)} → ${pickName(row.b.pick)}` }));
    } else {
      right.push(el("span", { class: "meta", text: `pick ${pickName(row.pick)}` + (row.label !== null && row.label !== undefined ? ` · label ${pickName(row.label)}` : "") +
        (row.confidence !== null && row.confidence !== undefined ? ` · conf ${num(row.confidence, 2)}` : "") }));
    }
    right.push(el("span", { class: "chip " + slug(row.status), text: row.status }));
    return el("summary", {}, picture(row.image, false),
      el("div", { class: "q" }, el("span", { class: "id", text: row.id }), row.question,
        row.category ? el("span", { class: "meta", text: row.category }) : null,
        row.flaw ? el("span", { class: "meta", text: row.flaw }) : null),
      el("div", {}, right));
  }
  const pickName = (i) => (i === null || i === undefined ? "none" : "#" + (i + 1));

  function rowElement(row) {
    const details = el("details", { class: "row", "data-id": row.id, "data-status": row.status,
      "data-confidence": row.confidence === null || row.confidence === undefined ? "" : String(row.confidence) }, summaryLine(row));
    details.addEventListener("toggle", () => {
      if (details.open && !details.querySelector(".detail")) details.append(detail(row));
    });
    return details;
  }

  function detail(row) {
    const box = el("div", { class: "detail" });
    box.append(el("div", { class: "big" }, picture(row.image, true), row.image && row.image.path ? el("div", { class: "kv", text: row.image.path }) : null));
    box.append(el("div", {}, el("b", { text: "Question: " }), row.question));
    if (section.kind === "audit") box.append(...auditDetail(row));
    else if (section.kind === "compare") box.append(compareDetail(row));
    else box.append(...judgedDetail(row));
    return box;
  }

  function candidates(row) {
    return el("ol", { class: "cands" }, row.candidates.map((text, i) => {
      const marks = [];
      if (i === row.label) marks.push("label");
      if (i === row.pick) marks.push("judge's pick");
      if (row.picks) for (const [who, at] of Object.entries(row.picks)) if (at === i && who !== "judge") marks.push(who);
      const extra = [];
      if (row.grades) extra.push(`grade ${num(row.grades[i], 2)}`);
      if (row.probs) extra.push(`p ${num(row.probs[i], 3)}`);
      return el("li", { class: [i === row.label ? "label" : "", i === row.pick ? "picked" : ""].join(" ").trim() },
        el("span", { class: "letter", text: "#" + (i + 1) }), text,
        extra.length || marks.length ? el("span", { class: "meta", text: [...extra, ...marks].join(" · ") }) : null);
    }));
  }

  function calls(row) {
    return el("div", { class: "calls" }, (row.calls || []).map((call, n) => {
      const shownAs = call.order
        ? el("ol", { class: "cands" }, call.order.map((orig, slot) => el("li", { class: orig === row.label ? "label" : "" },
            el("span", { class: "letter", text: letter(slot) }), `= #${orig + 1} `, el("span", { class: "meta", text: (row.candidates[orig] || "").slice(0, 120) }))))
        : el("div", { class: "kv", text: "display order not recorded (letters as the call wrote them)" });
      const answer = call.letter === null
        ? el("div", { class: "answer", text: "no answer parsed" })
        : el("div", { class: "answer", text: `answer ${call.letter} → ${pickName(call.pick)}` + (row.label !== null && row.label !== undefined && call.pick !== null ? (call.pick === row.label ? " (right)" : " (wrong)") : "") });
      const title = call.game === undefined ? `call ${n + 1}` : `game ${call.game + 1} · call ${n + 1}`;
      return el("div", { class: "call" }, el("h4", { text: title }), shownAs,
        el("div", { class: "think", text: call.think || "(no reasoning)" }), answer,
        call.raw ? el("details", {}, el("summary", { text: "whole output" }), el("pre", { class: "raw", text: call.raw })) : null);
    }));
  }

  function judgedDetail(row) {
    const out = [candidates(row)];
    if (row.reference) out.push(el("div", {}, el("b", { text: "Reference answer: " }), row.reference));
    const facts = [];
    if (row.picks) facts.push(`picks: ${Object.entries(row.picks).map(([k, v]) => `${k} ${pickName(v)}`).join(", ")}`);
    if (row.picked_grade !== undefined) facts.push(`grade of the judge's pick: ${num(row.picked_grade, 2)}`);
    if (row.usage) facts.push(`tokens: prompt ${row.usage.prompt_tokens}, completion ${row.usage.completion_tokens}`);
    facts.push(`orders ${row.consistent === null ? "–" : row.consistent ? "agree" : "disagree"}`);
    out.push(el("div", { class: "kv", text: facts.join(" · ") }));
    if (row.games) out.push(bracket(row));
    out.push(calls(row));
    return out;
  }

  function bracket(row) {
    const rounds = {};
    row.games.forEach((game, n) => (rounds[game.round] = rounds[game.round] || []).push([n, game]));
    return el("div", { class: "card bracket" }, el("h3", { text: "the judge's bracket" }),
      Object.entries(rounds).map(([round, games]) => el("div", { class: "kv" }, `round ${Number(round) + 1}: `,
        games.map(([n, game], i) => el("span", {}, i ? " · " : "", `game ${n + 1}: ${pickName(game.players[0])} vs ${pickName(game.players[1])} → `,
          el("b", { text: game.winner === null ? "undecided (coin)" : pickName(game.winner) }))))));
  }

  function compareDetail(row) {
    const names = section.header.names;
    const side = (r, name) => el("div", { class: "side" }, el("h3", {}, name, " ", el("span", { class: "chip " + slug(r.status), text: r.status })),
      candidates(r), el("div", { class: "kv", text: `pick ${pickName(r.pick)} · confidence ${num(r.confidence, 2)}` }), calls(r));
    return el("div", { class: "sides" + ($("f-sidebyside").checked ? "" : " stacked") }, side(row.a, names[0]), side(row.b, names[1]));
  }

  function auditDetail(row) {
    return [
      el("div", {}, el("b", { text: "Answer: " }), row.completion),
      row.reference ? el("div", {}, el("b", { text: "Reference: " }), row.reference) : null,
      el("div", { class: "kv" }, "judge paid ", el("b", { text: num(row.reward, 3) }), ` (even share ${num(row.even, 3)}) · gold `,
        el("b", { text: num(row.gold, 2) }), ` · step ${row.step} · auditor ${row.auditor}`),
      el("div", { class: "think", text: row.reasoning || "(no reasoning recorded)" }),
    ].filter(Boolean);
  }

  // -- tabs --------------------------------------------------------------------------------------------
  function select(i) {
    section = DATA.sections[i];
    for (const [n, button] of [...$("tabs").children].entries()) button.classList.toggle("active", n === i);
    const rows = section.rows;
    fill("f-status", rows.map((r) => r.status));
    fill("f-category", rows.map((r) => r.category));
    fill("f-subset", rows.map((r) => r.subset));
    fill("f-flaw", rows.map((r) => r.flaw));
    $("f-orders").parentElement.style.display = section.kind === "audit" ? "none" : "";
    $("sidebyside-label").style.display = section.kind === "compare" ? "" : "none";
    renderHeader();
    applyFilters();
  }

  $("tabs").append(...DATA.sections.map((s, i) => {
    const button = el("button", { type: "button", text: `${s.name} (${s.rows.length})` });
    button.addEventListener("click", () => select(i));
    return button;
  }));
  for (const id of ["f-status", "f-category", "f-subset", "f-flaw", "f-orders", "f-sort"]) $(id).addEventListener("change", applyFilters);
  let typing = null;
  $("f-search").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(applyFilters, 150); });
  $("f-sidebyside").addEventListener("change", () => {
    for (const node of document.querySelectorAll(".sides")) node.classList.toggle("stacked", !$("f-sidebyside").checked);
  });
  new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting) && shown < filtered.length) renderMore();
  }, { rootMargin: "600px" }).observe($("sentinel"));
  if (DATA.sections.length) select(0);
  else $("rows").append(el("div", { class: "empty", text: "nothing to show" }));
})();
