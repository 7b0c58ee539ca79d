"""One error hierarchy; every subclass has its own exit code and a hint saying what to do next."""

from __future__ import annotations


class PackagerError(Exception):
    """Base of every error the CLI turns into one line and an exit code."""

    exit_code = 1
    hint = ""

    def __init__(self, message: str, hint: str | None = None, details: str = "") -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint
        # Shown only with --debug (e.g. the converter's log tail).
        self.details = details

    def one_line(self) -> str:
        text = self.message if not self.hint else f"{self.message}; {self.hint}"
        return " ".join(text.split())


# 2 is click's usage error; 130 is Ctrl-C.
class CheckpointNotFound(PackagerError):
    exit_code = 10
    hint = "pass the folder that holds config.json and the *.safetensors files"


class InvalidCheckpointConfig(PackagerError):
    exit_code = 11
    hint = "fix or re-save config.json with transformers"


class UnsupportedModel(PackagerError):
    exit_code = 12
    hint = "packager converts dense Qwen3 (model_type qwen3) checkpoints only"


class UntiedEmbeddings(PackagerError):
    exit_code = 13
    hint = ("the ten-file draft bundle has no embeddings file, so its embeddings must be tied to lm_head "
            "(tie_word_embeddings: true, as in Qwen3-0.6B/1.7B/4B); convert an untied model as a target bundle "
            "with --kind target (or --eagle HEAD), which ships embeddings_bf16.bin")


class CorruptWeights(PackagerError):
    exit_code = 14
    hint = "re-download or re-save the checkpoint's safetensors files"


class MissingTokenizer(PackagerError):
    exit_code = 15
    hint = "copy the tokenizer files of the base model (tokenizer.json, tokenizer_config.json, vocab.json, merges.txt) into the checkpoint"


class AdapterMismatch(PackagerError):
    exit_code = 16
    hint = "pass the LoRA adapter that was trained on this base checkpoint"


class SpecError(PackagerError):
    exit_code = 17
    hint = "fix the release spec (see examples/release.toml)"


class OutputExists(PackagerError):
    exit_code = 18
    hint = "choose another --out or pass --force to replace it"


class InvalidOption(PackagerError):
    exit_code = 19


class ConversionFailed(PackagerError):
    exit_code = 20
    hint = "rerun with --debug to see the converter's log"


class SandboxViolation(ConversionFailed):
    exit_code = 21
    hint = "the converter tried to reach the network, start a process or write outside its work folder; nothing was installed or sent"


class BundleError(PackagerError):
    exit_code = 22


class FileSystemError(PackagerError):
    """An operating-system error (full disk, read-only file system, permissions, a name too long, ...)."""

    exit_code = 25
    hint = "free space, fix permissions or choose another path, then rerun"


class InputTooLarge(PackagerError):
    """An input nested too deeply or too large to be a real bundle file, spec or checkpoint config."""

    exit_code = 26
    hint = "the file is not what packager expects; restore it from the tool that wrote it"


class RuntimeCrashed(PackagerError):
    """The MNN runtime (run in a child process) crashed or was killed."""

    exit_code = 27
    hint = "run packager validate on the bundle; the weights or graph are likely damaged"


class EngineInstallFailed(PackagerError):
    """An MNN engine could not be installed from PyPI into packager's engine cache."""

    exit_code = 28
    hint = "check that PyPI is reachable (pip's own settings apply) and that the folder is writable; rerun"


class NotEnoughMemory(PackagerError):
    """`pair` would need more memory than is available (checked before loading)."""

    exit_code = 52
    hint = ("convert the target to a 4-bit MNN bundle with `packager convert TARGET --out TARGET-4bit` "
            "(or pass an MNN folder llmexport made) and pair against that")


class InitFileExists(PackagerError):
    """`packager init` would have to overwrite a file."""

    exit_code = 60
    hint = "packager init never overwrites a file: move it aside, or init another folder"


class InitTargetRefused(PackagerError):
    """`packager init` was pointed at a folder it must not write into (inside the checkpoint, a file, ...)."""

    exit_code = 61
    hint = "init the release repository outside the checkpoint and the adapter (it may contain them)"


# Longest excerpt of any user-supplied value that a message shows.
MAX_SHOWN = 200


def shorten(value: object, limit: int = MAX_SHOWN) -> str:
    """`repr`-like text of a value, cut to `limit` characters with a note of how much was left out."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def printable(value: object) -> str:
    """Text with every control character and line or paragraph separator escaped (\\n, \\x1b, \\u2028): a name
    shown on a terminal or written into a one-line comment can neither move the cursor nor start a new line."""
    import unicodedata

    return "".join(char.encode("unicode_escape").decode("ascii") if unicodedata.category(char) in ("Cc", "Zl", "Zp")
                   else char for char in str(value))


def from_os_error(exc: OSError, doing: str = "") -> FileSystemError:
    """One line with the OS's own reason and the (shortened) path it concerns."""
    reason = exc.strerror or exc.__class__.__name__
    where = f" {shorten(str(exc.filename), 120)}" if exc.filename is not None else ""
    what = f"{doing}: " if doing else ""
    return FileSystemError(f"{what}{reason}{where}")


# Exit codes of commands whose output is a full report rather than one error line.
VALIDATION_FAILED = 30
CHECKSUM_MISMATCH = 31
VERIFY_FAILED = 50
ENGINES_CHECK_FAILED = 32


# EAGLE-3 heads (convert --eagle): each refusal happens before any conversion work.
class EagleHeadLayout(PackagerError):
    exit_code = 53
    hint = ("pass an EAGLE-3 head in the SpecForge / AngelSlim layout (config.json and model.safetensors with fc, "
            "midlayer.*, norm, lm_head and d2t); a tensor llmexport does not find stays random without a word")


class EagleHeadMismatch(PackagerError):
    exit_code = 54
    hint = "pass the head that was trained for this target (its config.json must describe the target's shape)"


class TargetTooShallow(PackagerError):
    exit_code = 55
    hint = ("EAGLE-3 reads the inputs of target layers 2, N/2 and N-3, three distinct layers only when the "
            "target has at least 7 layers")


class EagleVocabularyMap(PackagerError):
    exit_code = 56
    hint = "d2t must hold draft_vocab_size offsets, each mapping a draft id into the target's vocabulary"


class PickleHeadRefused(PackagerError):
    exit_code = 57
    hint = ("pytorch_model.bin is a pickle, which can run code when loaded; convert it to model.safetensors, or "
            "pass --allow-pickle-head if you trust where it came from")


class EagleHeadUnfaithful(PackagerError):
    exit_code = 58
    hint = "the exported head does not compute what the checkpoint computes; nothing was written (report this with --debug)"


# Lookahead corpora (convert --lookahead CORPUS): each refusal happens before any conversion work.
class CorpusUnusable(PackagerError):
    """The corpus is not a regular file packager may read: missing, a folder, a device or pipe, inside --out."""

    exit_code = 80
    hint = "pass a regular text file outside --out, or --lookahead alone to draft from the prompt's own n-grams"


class CorpusNotText(PackagerError):
    """The corpus is not what MNN can use: empty, not UTF-8 text, NUL bytes, or too large."""

    exit_code = 81
    hint = "pass UTF-8 text of at most 8 MiB: the text your users' prompts and answers repeat"
