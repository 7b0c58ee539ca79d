"""The ten-file MNN bundle: its file names and what each one is for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# name -> purpose; the order is the order the card lists them in.
FILES: dict[str, str] = {
    "config.json": "MNN runtime settings (main config: paths, CPU draft settings)",
    "config_cpu.json": "Draft runtime settings (CPU, 2 threads, greedy)",
    "config_opencl.json": "Reference OpenCL target settings (app-specific draftmodel keys)",
    "draft_config_cpu.json": "Draft runtime settings (same as config_cpu.json)",
    "llm.mnn": "Model graph",
    "llm.mnn.json": "Model graph as JSON (reference copy)",
    "llm.mnn.weight": "Model weights (quantized)",
    "llm_config.json": "Model settings and chat template",
    "runtime_config.json": "Recommended speculative-decoding settings and compatible targets (app-level)",
    "tokenizer.txt": "Tokenizer",
}
RUNTIME_CONFIGS = ("config.json", "config_cpu.json", "draft_config_cpu.json", "config_opencl.json",
                   "runtime_config.json")
# What an app downloads to run the draft; the rest are reference files.
APP_FILES = ("llm.mnn", "llm.mnn.weight", "llm_config.json", "config.json", "config_cpu.json",
             "draft_config_cpu.json", "tokenizer.txt")


@dataclass(frozen=True)
class Bundle:
    path: Path

    def file(self, name: str) -> Path:
        return self.path / name

    def missing(self) -> list[str]:
        return [name for name in FILES if not (self.path / name).is_file()]

    def extra(self) -> list[str]:
        return sorted(p.name for p in self.path.iterdir() if p.name not in FILES)
