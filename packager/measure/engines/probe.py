"""Runs inside an engine's own virtual environment: loads a bundle, tokenizes prompts, returns logits.

Imports only MNN (+ numpy) and the standard library; nothing of packager, which is not installed there.
Usage: python -I probe.py REQUEST.json. The request names the bundle, the prompts (text), the token ids to run
(or null: the probe's own) and an output folder. Before each step the probe writes the step's name to
OUT/stage, so when the engine crashes (SIGSEGV) the parent knows where. It writes OUT/result.json and
OUT/logits.npy (float32, one row per prompt: the next-token logits after the prompt's last token), then
leaves with os._exit: some engines crash while tearing down at interpreter exit.
"""

import json
import os
import sys
import types


def _stage(out, name):
    with open(os.path.join(out, "stage"), "w", encoding="utf-8") as handle:
        handle.write(name)


def _no_telemetry():
    # MNN.tools' log module pip-installs a package and phones home when imported; MNN.llm does not import
    # it, but nothing MNN imports may ever run it.
    stub = types.ModuleType("MNN.tools.utils.log")
    stub.mnn_logger = None
    sys.modules["MNN.tools.utils.log"] = stub


def main(request_path):
    request = json.loads(open(request_path, encoding="utf-8").read())
    out = request["out"]
    os.dup2(2, 1)  # what MNN prints goes to the log, never to a pipe the parent reads
    _no_telemetry()
    _stage(out, "import")
    import numpy as np

    try:
        import MNN.llm as mnn_llm

        create = mnn_llm.create
    except (ImportError, AttributeError) as exc:
        missing = getattr(exc, "name", None) or f"{type(exc).__name__}: {exc}"
        return {"loads": False, "reason": f"this MNN wheel has no LLM runtime (no {missing})"}
    _stage(out, "create")
    llm = create(os.path.join(request["bundle"], "config.json"))
    engine = getattr(llm, "_c_obj", llm)
    _stage(out, "load")
    loaded = engine.load()
    if loaded is False:
        return {"loads": False, "reason": "load() returned False"}
    _stage(out, "tokenize")
    own = [[int(i) for i in engine.tokenizer_encode(text)] for text in request["prompts"]]
    rows = []
    for index, ids in enumerate(request["ids"] or own):
        _stage(out, f"forward {index}")
        engine.reset()
        logits = engine.forward([int(i) for i in ids])
        values = np.array(logits.read(), dtype=np.float32)
        width = int(list(logits.shape)[-1])
        rows.append(values.reshape(-1, width)[-1])
    engine.reset()
    _stage(out, "write")
    np.save(os.path.join(out, "logits.npy"), np.stack(rows))
    return {"loads": True, "ids": own, "modules": _third_party(), "mnn_tools_imported": "MNN.tools" in sys.modules}


def _third_party():
    """Top-level modules from outside the standard library this process imported (MNN and numpy only)."""
    names = {name.split(".")[0] for name in sys.modules}
    return sorted(
        n for n in names if (n not in sys.stdlib_module_names and not n.startswith("_")) or n == "_mnncengine"
    )


if __name__ == "__main__":
    target = json.loads(open(sys.argv[1], encoding="utf-8").read())["out"]
    try:
        result = main(sys.argv[1])
    except Exception as exc:
        result = {"loads": False, "reason": f"{type(exc).__name__}: {str(exc)[:300]}"}
    with open(os.path.join(target, "result.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    sys.stderr.flush()
    os._exit(0)
