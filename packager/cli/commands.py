"""The commands `packager` has: the stage of a release each belongs to, the module it lives in and what its help
says, read without importing any command's module (a command line imports only the module of the command it runs)."""

from __future__ import annotations

# `packager --help` lists the commands by the stage of a release they belong to, in this order.
STAGES = (
    ("build", ("convert", "quant-sweep", "card", "checksum")),
    ("check", ("validate", "check-spec", "verify", "engines")),
    ("measure", ("pair", "speculate")),
    ("publish", ("plan", "release", "upload", "pull", "verify-remote", "hub")),
    ("trust", ("sign", "verify-signature")),
    ("set up", ("init", "cache")),
)
# Where each command lives (packager.cli.<module>) and the first sentence of its help. A command's module is
# imported only when the command runs or its help is asked for: `packager --help` lists the commands from this
# table alone, and `packager validate` never imports what `release` needs. tests/test_cli.py checks each sentence
# against the command's own help.
COMMANDS = {
    "convert": (
        "build",
        "Convert a Hugging Face checkpoint (optionally + LoRA) into an MNN bundle: the ten-file draft bundle, a "
        "target bundle, or a target with its EAGLE-3 head.",
    ),
    "quant-sweep": (
        "sweep",
        "Convert CHECKPOINT with several quantization recipes and print bytes vs quality for each.",
    ),
    "card": ("card", "Render the model card (README.md) from the release spec, the bundle's files and measurements."),
    "checksum": (
        "build",
        "Write (or --check) the bundle's xxh3-128 manifest checksums.xxh128, in `xxhsum --tag -H2` format.",
    ),
    "validate": (
        "check",
        "Check bundles: JSON syntax, schemas, unknown keys, completeness, cross-file consistency, checksums.",
    ),
    "check-spec": (
        "check",
        "Check release specs without touching a Hub: schema, TODOs left by init, training figures.",
    ),
    "verify": ("prove", "Check that BUNDLE (MNN) behaves like its source checkpoint (transformers)."),
    "engines": (
        "engines",
        "Check bundles in real MNN engines, each installed from PyPI into its own cached environment.",
    ),
    "pair": (
        "prove",
        "Measure how well DRAFT drafts for TARGET (checkpoints or MNN model folders): compatibility, acceptance, "
        "speedup.",
    ),
    "speculate": (
        "speculate",
        "Run BUNDLE's speculative mode with MNN's own generation strategy (eagle or lookahead) and plain decoding on "
        "the same chat-templated prompts, greedy, and compare: the tokens (lossless up to near-ties), the tokens a "
        "step accepts (95% interval over prompts, from the engine's own record) and decode tokens/s of each with "
        "their ratio over interleaved repeats, labelled with this CPU.",
    ),
    "plan": (
        "matrix",
        "Print the jobs a matrix release spec expands to: each one's stable id, what it builds and where it publishes.",
    ),
    "release": (
        "publish",
        "Convert, validate, write the card and manifest, upload in one commit, verify, tag, then put the repo into "
        "[release] collection; stop at the first failure.",
    ),
    "upload": ("publish", "Publish BUNDLE (ten files, README.md, checksums.xxh128) to REPO_ID in one verified commit."),
    "pull": ("trust", "Download a release into DIR, every file checked against its manifest and its signature."),
    "verify-remote": (
        "publish",
        "Download every file of a remote revision and check it against its xxh3-128 manifest (and its model.sig, when "
        "signed and you say whom you trust).",
    ),
    "hub": ("hubserver", "A local Hub-compatible server, to rehearse releases offline."),
    "sign": ("trust", "Write BUNDLE/model.sig: an OpenSSF model-signing signature over every file of the release."),
    "verify-signature": (
        "trust",
        "Check BUNDLE's model.sig: signed by whom you trust, over exactly the bundle's files, none changed.",
    ),
    "init": ("init", "Start a release repository for a new draft in DIR."),
    "cache": (
        "cache",
        "Inspect or empty packager's caches: graphs (built once per model shape and quantization) and targets (a "
        "target's greedy continuations and argmaxes, per prompt, for pair and quant-sweep).",
    ),
}


# What `packager --help` says of each command: a line that fits beside its name at 80 columns (click would cut the
# first sentence mid-word there); each command carries it as its short help (PackagerGroup.add_command).
SUMMARIES = {
    "convert": "Convert a checkpoint into an MNN bundle.",
    "quant-sweep": "Convert with several recipes: bytes against quality.",
    "card": "Render the model card from the spec and measurements.",
    "checksum": "Write or check the bundle's xxh3-128 manifest.",
    "validate": "Check bundles: schemas, cross-file facts, checksums.",
    "check-spec": "Check release specs without touching a Hub.",
    "verify": "Check that a bundle computes what its source does.",
    "engines": "Check bundles in real MNN engines from PyPI.",
    "pair": "Measure how well a draft drafts for a target.",
    "speculate": "Run MNN's own speculative decoding and measure it.",
    "plan": "List the jobs of a matrix release spec.",
    "release": "Convert, check, card, sign, upload and tag a release.",
    "upload": "Publish a bundle in one verified commit.",
    "pull": "Download a release, every file checked.",
    "verify-remote": "Check every file of a remote revision.",
    "hub": "A local Hub-compatible server, to rehearse releases.",
    "sign": "Sign every file of the release (model.sig).",
    "verify-signature": "Check a bundle's model.sig and who signed it.",
    "init": "Start a release repository for a new draft.",
    "cache": "Inspect or empty packager's graph and target caches.",
}
