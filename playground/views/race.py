"""The replay race: the speculative run and the target alone side by side, each token appearing at the
moment it was produced in its own measured run. Pure functions (records and a tokenizer in, HTML out).

Times are never invented: a round's tokens all appear at the end of that round, at the cumulative
draft + verify seconds of the run's rounds so far (round 0 includes the prompt's pass), the same
seconds trace.summarize adds up into the run's engine time. A lane finishes at its run's engine time,
so its final tokens/s is the run's tokens/s.

The markup is static and complete (both final texts, the finish times) and carries the timeline as
JSON in an HTML-escaped data attribute; PLAYER_JS (run by the page, e.g. gr.HTML(js_on_load=...))
replays it at 1x or faster, writing text with textContent only, so nothing a user or the model
typed can become markup.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Sequence

from playground import trace
from playground.core.records import RoundRecord
from playground.views.tokens import piece_text

if TYPE_CHECKING:  # a view never imports transformers: the tokenizer is passed in
    from transformers import PreTrainedTokenizerBase

SPEEDS = (1, 4)  # playback speeds offered; the first is the default


@dataclass(frozen=True)
class Lane:
    """One side of the race: its label, (t seconds, text piece) per output token, and when its run ended."""

    label: str
    events: list[tuple[float, str]]
    finish_s: float
    tokens_per_s: float  # trace.summarize's, the figure the comparison panel shows

    @property
    def text(self) -> str:
        return "".join(piece for _, piece in self.events)


def pieces(rounds: Sequence[RoundRecord], tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The text of each output token, in order, decoded as the token view decodes it (with left context)."""
    context: list[int] = []
    out = []
    for token in (t for r in rounds for t in r.new_tokens):
        out.append(piece_text(tokenizer, context, token))
        context.append(token)
    return out


def round_ends(rounds: Sequence[RoundRecord]) -> list[float]:
    """The measured moment each round ended: the cumulative draft + verify seconds of the rounds so far."""
    return list(accumulate(r.draft_s + r.verify_s for r in rounds))


def timeline(rounds: Sequence[RoundRecord], token_pieces: Sequence[str]) -> list[tuple[float, str]]:
    """(t seconds, text piece) per output token: every token of a round at the end of that round.
    `token_pieces` holds one piece per output token (see `pieces`)."""
    total = sum(len(r.new_tokens) for r in rounds)
    if len(token_pieces) != total:
        raise ValueError(f"{len(token_pieces)} text pieces for {total} output tokens")
    it = iter(token_pieces)
    return [(end, next(it)) for r, end in zip(rounds, round_ends(rounds)) for _ in r.new_tokens]


def lane(label: str, rounds: Sequence[RoundRecord], tokenizer: PreTrainedTokenizerBase) -> Lane:
    ends = round_ends(rounds)
    return Lane(
        label,
        timeline(rounds, pieces(rounds, tokenizer)),
        ends[-1] if ends else 0.0,
        trace.summarize(list(rounds))["tokens_per_s"],
    )


def seconds(s: float) -> str:
    """A clock reading, as PLAYER_JS writes it (toFixed(2))."""
    return f"{s:.2f} s"


def rate(tokens_per_s: float) -> str:
    return f"{tokens_per_s:.1f} tokens/s" if tokens_per_s == tokens_per_s else "– tokens/s"


def data_json(lanes: Sequence[Lane]) -> str:
    """The timeline as JSON with <, > and & escaped (\\u003c ...), for the data attribute."""
    doc = {
        "lanes": [
            {"t": [t for t, _ in ln.events], "text": [p for _, p in ln.events], "finish": ln.finish_s} for ln in lanes
        ]
    }
    return (
        json.dumps(doc, ensure_ascii=True, separators=(",", ":"))
        .replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
    )


def _lane_html(ln: Lane, index: int, first: bool, prompt_html: str) -> str:
    done = f"finished in {seconds(ln.finish_s)}" + (" · first" if first else "")
    return (
        f'<div class="race-lane race-lane-{index}" data-lane="{index}">'
        f'<div class="race-lane-head"><span class="race-label">{html.escape(ln.label)}</span>'
        f'<span class="race-figures"><span class="race-time" title="this side\'s clock">{seconds(ln.finish_s)}</span>'
        f' · <span class="race-rate" title="tokens shown / this side\'s clock">{rate(ln.tokens_per_s)}</span>'
        f'</span><span class="race-done">{done}</span></div>'
        f'<div class="race-bar" aria-hidden="true"><div class="race-fill" style="width:100%"></div></div>'
        f'<div class="race-box">{prompt_html}<span class="race-text">{html.escape(ln.text)}</span></div></div>'
    )


def render(spec: Lane, base: Lane, prompt: str = "") -> str:
    """The race as HTML: controls, a clock, and the two lanes in their final state (PLAYER_JS replays it)."""
    lanes = (spec, base)
    winner = min(range(2), key=lambda i: lanes[i].finish_s) if spec.finish_s != base.finish_s else None
    prompt_html = f'<span class="race-prompt">{html.escape(prompt)}</span>' if prompt else ""
    speeds = "".join(
        f'<button type="button" class="race-btn race-speed" data-speed="{s}" '
        f'aria-pressed="{"true" if i == 0 else "false"}" title="play at {s}× the measured speed">{s}×</button>'
        for i, s in enumerate(SPEEDS)
    )
    body = "".join(_lane_html(ln, i, i == winner, prompt_html) for i, ln in enumerate(lanes))
    return (
        f'<div class="race" data-state="final" data-race="{html.escape(data_json(lanes), quote=True)}">{STYLE}'
        f'<div class="race-head"><h4>Replay race</h4>'
        f'<button type="button" class="race-btn race-replay">▶ Replay</button>'
        f'<span class="race-speeds" role="group" aria-label="playback speed">{speeds}</span>'
        f'<span class="race-clock-box">race clock <span class="race-clock">{seconds(max(spec.finish_s, base.finish_s))}</span></span>'
        f'</div><div class="race-note">Each token appears when the round that produced it ended in its own '
        f"measured run (the cumulative draft + verify seconds of the rounds so far); all tokens of a round appear "
        f'together.</div><div class="race-lanes">{body}</div></div>'
    )


def race_html(
    spec_rounds: Sequence[RoundRecord],
    base_rounds: Sequence[RoundRecord],
    tokenizer: PreTrainedTokenizerBase,
    prompt: str = "",
    spec_label: str = "Speculative",
) -> str:
    """The race of a speculative run against its target-alone baseline."""
    return render(lane(spec_label, spec_rounds, tokenizer), lane("Target alone", base_rounds, tokenizer), prompt)


STYLE = """<style>
.race { margin-top: 14px; color: var(--body-text-color, inherit); }
.race-head { display: flex; flex-wrap: wrap; align-items: center; gap: 8px 12px; }
.race-head h4 { margin: 0; font-size: 15px; }
.race .race-head .race-btn { font: inherit; font-size: 13px; font-weight: 500; padding: 3px 10px; margin: 0;
  border-radius: 6px; cursor: pointer; box-shadow: none; border: 1px solid var(--border-color-primary, #bbb);
  background: var(--background-fill-primary, #fff); color: var(--body-text-color, inherit); }
.race .race-head .race-btn:hover { background: var(--background-fill-secondary, #eee); }
.race .race-head .race-replay { font-weight: 600; border-color: var(--tok-correction, #0072B2); }
.race-speeds { display: inline-flex; gap: 4px; }
.race .race-head .race-btn.race-speed[aria-pressed="true"] { background: var(--tok-correction, #0072B2);
  border-color: var(--tok-correction, #0072B2); color: #fff; }
.race-clock-box { font-size: 13px; color: var(--body-text-color-subdued, #666); }
.race-clock { font-family: var(--font-mono, monospace); font-weight: 600; color: var(--body-text-color, inherit); }
.race-note { font-size: 12px; color: var(--body-text-color-subdued, #777); margin: 4px 0 8px; }
.race-lanes { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
@media (max-width: 900px) { .race-lanes { grid-template-columns: 1fr; } }
.race-lane-head { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 10px; font-size: 14px; margin-bottom: 4px; }
.race-label { font-weight: 600; }
.race-figures { font-family: var(--font-mono, monospace); font-size: 13px; }
.race-done { font-size: 12px; font-weight: 600; padding: 1px 6px; border-radius: 4px;
  background: var(--tok-accepted-bg, rgba(0, 158, 115, 0.16)); border: 1px solid var(--tok-accepted, #009E73); }
.race-done[hidden] { display: inline-block; visibility: hidden; }  /* keeps its place */
.race-bar { height: 6px; border-radius: 3px; background: var(--border-color-primary, #ddd); overflow: hidden; margin-bottom: 6px; }
.race-fill { height: 100%; background: var(--tok-accepted, #009E73); }
.race-lane-1 .race-fill { background: var(--tok-target, #999); }
.race-box { font-family: var(--font-mono, ui-monospace, monospace); font-size: 14px; line-height: 1.7;
  white-space: pre-wrap; overflow-wrap: anywhere; padding: 10px 12px; min-height: 100px; max-height: 320px;
  overflow-y: auto; border: 1px solid var(--border-color-primary, #ccc); border-radius: 8px;
  background: var(--background-fill-secondary, transparent); }
.race-prompt { color: var(--body-text-color-subdued, #777); opacity: 0.85; }
.race-prompt::after { content: "\\2002"; }
</style>"""

# Runs in the page with `element` (the component's element) and `watch` (Gradio 6 gr.HTML js_on_load):
# finds the .race inside, wires its buttons, and replays the embedded timeline. Text goes in through
# textContent / append(string) only. Re-wired whenever the component's value changes.
PLAYER_JS = """
const player = { raf: 0 };
function setup() {
  cancelAnimationFrame(player.raf);
  player.raf = 0;
  const race = element.querySelector('.race');
  if (!race || !race.dataset.race) return;
  let data;
  try { data = JSON.parse(race.dataset.race); } catch (e) { return; }
  const els = race.querySelectorAll('.race-lane');
  const lanes = data.lanes.map((d, i) => ({
    d, box: els[i].querySelector('.race-box'), text: els[i].querySelector('.race-text'),
    time: els[i].querySelector('.race-time'), rate: els[i].querySelector('.race-rate'),
    done: els[i].querySelector('.race-done'), fill: els[i].querySelector('.race-fill'), shown: 0 }));
  const clock = race.querySelector('.race-clock');
  const end = Math.max(0, ...lanes.map(l => l.d.finish));
  const pressed = race.querySelector('.race-speed[aria-pressed="true"]');
  let speed = pressed ? Number(pressed.dataset.speed) : 1, base = 0, t0 = 0, playing = false;
  const secs = s => s.toFixed(2) + ' s';
  function draw(t) {
    clock.textContent = secs(Math.min(t, end));
    for (const l of lanes) {
      let n = l.shown;
      while (n < l.d.t.length && l.d.t[n] <= t) n++;
      if (n > l.shown) {
        l.text.append(l.d.text.slice(l.shown, n).join(''));
        l.shown = n;
        l.box.scrollTop = l.box.scrollHeight;
      }
      const own = Math.min(t, l.d.finish);
      l.time.textContent = secs(own);
      l.rate.textContent = own > 0 ? (n / own).toFixed(1) + ' tokens/s' : '– tokens/s';
      l.fill.style.width = (l.d.t.length ? 100 * n / l.d.t.length : 100) + '%';
      l.done.hidden = t < l.d.finish;
    }
  }
  function frame(now) {
    const t = base + (now - t0) / 1000 * speed;
    draw(t);
    if (t < end) { player.raf = requestAnimationFrame(frame); }
    else { playing = false; player.raf = 0; race.dataset.state = 'final'; }
  }
  race.querySelector('.race-replay').onclick = () => {
    cancelAnimationFrame(player.raf);
    for (const l of lanes) { l.text.textContent = ''; l.shown = 0; }
    base = 0; t0 = performance.now(); playing = true; race.dataset.state = 'playing';
    draw(0);
    player.raf = requestAnimationFrame(frame);
  };
  race.querySelectorAll('.race-speed').forEach(button => {
    button.onclick = () => {
      const now = performance.now();
      if (playing) { base += (now - t0) / 1000 * speed; t0 = now; }
      speed = Number(button.dataset.speed);
      race.querySelectorAll('.race-speed').forEach(b => b.setAttribute('aria-pressed', String(b === button)));
    };
  });
}
setup();
watch('value', setup);
"""
