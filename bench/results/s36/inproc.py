"""Shared set-up of stop 36's in-process scripts (stepdbg, dsk0, k0cost, capexp, syncab): the bench's engines
for some configurations in one process, the held-out stream, and an adaptive engine forced never to draft."""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import adaptive as A, common  # noqa: E402


def engines_for(configs: str, B: int, src: str, toks: int):
    """({name: LLM}, the stream's max(4, B) prompts): bench/adaptive.py's engines (its small calibration,
    float32, one thread, shared target weights), warmed up as the bench warms them."""
    args = A.parse_args([f"--configs={configs}", "--k_max=3", "--dtypes=float32", f"--batch_sizes={B}",
                         f"--sources={src}", "--num_prompts=4", f"--max_tokens={toks}", "--ignore_eos", "--plot_dir="])
    common.setup_threads(1)
    common.share_target_weights()
    wd = Path(tempfile.mkdtemp())
    files = A.write_calibration_files(args, wd)
    engines, _ = A.build_engines(args, "float32", files, wd)
    sets = common.warmed_prompt_sets(engines, args)
    return engines, sets[src][:max(4, B)]


def never_drafting(llm):
    """The engine with its controller reset and forced to plain rounds: the draft step at k = 0 without a
    cold start or probes, adaptive verify's gate always 'no gain' without probes. Plain engines as they are."""
    ctl = llm.engine.control
    if ctl is None:
        return llm
    ctl.reset()
    if ctl.step is not None:
        st = ctl.step
        st.k, st._cold, st.probe_interval = 0, False, 0
    else:
        ctl.floor.probe_interval = 0
        ctl.verify.predicts_gain = lambda *a, **k: False
    return llm


def tok_s(run) -> float:
    return sum(map(len, run.outputs)) / run.cpu_s


def capture_variants(engines: dict):
    """variant(v) for v in plain / dspark / nocap: the plain engine, or the DSpark sync engine forced never
    to draft, with its layer capture and refresh entries as they are (dspark) or switched off (nocap);
    pending entries cleared (capexp.py, s37/capexp_b4.py)."""
    eng = engines["dspark7_sync"].engine
    orig_add, orig_cap = eng.rounds._add_entries, eng.rounds.capture_layers

    def variant(v):
        llm = never_drafting(engines["plain" if v == "plain" else "dspark7_sync"])
        if v == "nocap":
            eng.rounds._add_entries = lambda out, entries: None
            eng.rounds.capture_layers = ()
        elif v == "dspark":
            eng.rounds._add_entries = orig_add
            eng.rounds.capture_layers = orig_cap
        eng.rounds.pending.clear()
        return llm
    return variant
