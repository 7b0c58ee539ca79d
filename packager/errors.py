"""One error hierarchy; every subclass has its own exit code and a hint saying what to do next."""

from __future__ import annotations

from typing import Any

from . import DISTRIBUTION

# Every exit code packager ends with, in one block (tests/test_errors.py: no two outcomes share one). An error
# class takes its own from here; the outcomes that are no error class carry their documentation in `#:` comments:
# the exit-code page of the docs is generated from them and from the classes' docstrings (docs/_ext/packager_docs.py).
#: Success.
SUCCESS = 0
PACKAGER_ERROR = 1
#: Command-line usage error (click): an unknown option, a missing argument, a value of the wrong kind.
USAGE_ERROR = 2
CHECKPOINT_NOT_FOUND = 10
INVALID_CHECKPOINT_CONFIG = 11
UNSUPPORTED_MODEL = 12
UNTIED_EMBEDDINGS = 13
CORRUPT_WEIGHTS = 14
MISSING_TOKENIZER = 15
ADAPTER_MISMATCH = 16
SPEC_ERROR = 17
OUTPUT_EXISTS = 18
INVALID_OPTION = 19
CONVERSION_FAILED = 20
SANDBOX_VIOLATION = 21
BUNDLE_ERROR = 22
MANIFEST_ERROR = 23
CARD_ERROR = 24
FILE_SYSTEM_ERROR = 25
INPUT_TOO_LARGE = 26
RUNTIME_CRASHED = 27
ENGINE_INSTALL_FAILED = 28
EXTRA_NOT_INSTALLED = 29
#: `validate` found errors (or warnings with `--strict`).
VALIDATION_FAILED = 30
#: `checksum --check` or `verify-remote` found mismatching, missing or extra files.
CHECKSUM_MISMATCH = 31
#: `engines check`: a checked engine at or above the bundle's declared minimum did not load it or disagreed.
ENGINES_CHECK_FAILED = 32
HUB_ERROR = 40
HUB_AUTH_ERROR = 41
HUB_FORBIDDEN = 42
HUB_NOT_FOUND = 43
HUB_CONFLICT = 44
HUB_VERIFICATION_FAILED = 45
HUB_REVISION_REFUSED = 46
HUB_VISIBILITY_REFUSED = 47
HUB_BAD_TARGET = 48
VERIFY_FAILED = 50  # VerifyFailed's code, a report's too (documented on the class)
PAIR_INCOMPATIBLE = 51
NOT_ENOUGH_MEMORY = 52
EAGLE_HEAD_LAYOUT = 53
EAGLE_HEAD_MISMATCH = 54
TARGET_TOO_SHALLOW = 55
EAGLE_VOCABULARY_MAP = 56
PICKLE_HEAD_REFUSED = 57
EAGLE_HEAD_UNFAITHFUL = 58
INIT_FILE_EXISTS = 60
INIT_TARGET_REFUSED = 61
MATRIX_INVALID = 62
MATRIX_JOBS_FAILED = 63
MATRIX_BUSY = 64
COLLECTION_NOT_UPDATED = 65
COLLECTION_FORBIDDEN = 66
GATING_FAILED = 67
HUB_GATED = 68
FAMILY_LICENSE_CONFLICT = 69
SIGNING_KEY_INVALID = 70
SIGNING_KEY_CURVE = 71
SIGNING_KEY_LOCKED = 72
SIGNATURE_MALFORMED = 73
SIGSTORE_FAILED = 74
SIGNATURE_COVERAGE = 75
SIGNATURE_UNSAFE_PATH = 76
SIGNATURE_UNTRUSTED = 77
CONTENT_MISMATCH = 78
ENGINE_TOO_OLD = 79
CORPUS_UNUSABLE = 80
CORPUS_NOT_TEXT = 81
SPECULATION_UNAVAILABLE = 82
SPECULATION_NOT_LOSSLESS = 83
DFLASH_DRAFT_LAYOUT = 84
DFLASH_DRAFT_MISMATCH = 85
DFLASH_MASK_TOKEN = 86
DFLASH_TARGET_REFUSED = 87
DFLASH_DRAFT_UNFAITHFUL = 88
DFLASH_TARGET_UNFAITHFUL = 89
#: Interrupted (Ctrl-C); nothing is left half-written (an interrupted `pull` keeps `.DIR.pull/` to resume and says so).
INTERRUPTED = 130
#: Terminated (SIGTERM); handled exactly like Ctrl-C.
TERMINATED = 143


class PackagerError(Exception):
    """Base of every error the CLI turns into one line and an exit code."""

    exit_code = PACKAGER_ERROR
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
    """The checkpoint folder is missing, not a folder or unreadable."""

    exit_code = CHECKPOINT_NOT_FOUND
    hint = "pass the folder that holds config.json and the *.safetensors files"


class InvalidCheckpointConfig(PackagerError):
    """`config.json` is missing, not JSON, or a required field is wrong."""

    exit_code = INVALID_CHECKPOINT_CONFIG
    hint = "fix or re-save config.json with transformers"


class UnsupportedModel(PackagerError):
    """Not a model family packager converts (`model_type` or layer types: mixture-of-experts, linear attention)."""

    exit_code = UNSUPPORTED_MODEL
    hint = "README: Supported families lists the families packager converts"  # raisers give the list (families)


class UntiedEmbeddings(PackagerError):
    """Untied embeddings in a draft bundle (convert them with `--kind target` or `--eagle`)."""

    exit_code = UNTIED_EMBEDDINGS
    hint = (
        "the ten-file draft bundle has no embeddings file, so its embeddings must be tied to lm_head "
        "(tie_word_embeddings: true); convert an untied model as a target bundle "
        "with --kind target (or --eagle HEAD), which ships embeddings_bf16.bin"
    )


class CorruptWeights(PackagerError):
    """Weights missing, truncated, corrupt, or not matching the config."""

    exit_code = CORRUPT_WEIGHTS
    hint = "re-download or re-save the checkpoint's safetensors files"


class MissingTokenizer(PackagerError):
    """Tokenizer files or chat template missing, or a tokenizer larger than the vocabulary."""

    exit_code = MISSING_TOKENIZER
    hint = (
        "copy the tokenizer files of the base model (tokenizer.json, tokenizer_config.json, vocab.json, merges.txt) "
        "into the checkpoint"
    )


class AdapterMismatch(PackagerError):
    """The LoRA adapter is missing pieces or does not fit the base."""

    exit_code = ADAPTER_MISMATCH
    hint = "pass the LoRA adapter that was trained on this base checkpoint"


class SpecError(PackagerError):
    """The release spec is unreadable, not TOML, or fails its schema (the message names the field's path, e.g. a TODO
    left by `init`); also `check-spec`'s exit when a spec fails."""

    exit_code = SPEC_ERROR
    hint = "fix the release spec (see examples/release.toml)"


class OutputExists(PackagerError):
    """`--out` exists (use `--force`), or is something `--force` may not replace (not a bundle, an input, the current
    or home directory); a non-empty `pull` DIR."""

    exit_code = OUTPUT_EXISTS
    hint = "choose another --out or pass --force to replace it"


class InvalidOption(PackagerError):
    """An invalid option value (e.g. `--quant-bits 3`, a block that does not divide the model)."""

    exit_code = INVALID_OPTION


class ConversionFailed(PackagerError):
    """The converter failed (`--debug` shows its log)."""

    exit_code = CONVERSION_FAILED
    hint = "rerun with --debug to see the converter's log"


class SandboxViolation(ConversionFailed):
    """The converter tried something the fence forbids (network, a child process, a write outside its folder)."""

    exit_code = SANDBOX_VIOLATION
    hint = (
        "the converter tried to reach the network, start a process or write outside its work folder; nothing was "
        "installed or sent"
    )


class BundleError(PackagerError):
    """The bundle folder is missing, or holds something other than regular files."""

    exit_code = BUNDLE_ERROR


class FileSystemError(PackagerError):
    """An operating-system error (full disk, read-only file system, permissions, a name too long, ...): the line gives
    the system's own reason."""

    exit_code = FILE_SYSTEM_ERROR
    hint = "free space, fix permissions or choose another path, then rerun"


class InputTooLarge(PackagerError):
    """An input nested too deeply or too large to be a real bundle file, spec or checkpoint config."""

    exit_code = INPUT_TOO_LARGE
    hint = "the file is not what packager expects; restore it from the tool that wrote it"


class RuntimeCrashed(PackagerError):
    """The MNN runtime (run in a child process) crashed or was killed while loading or running a bundle (the signal is
    named)."""

    exit_code = RUNTIME_CRASHED
    hint = "run packager validate on the bundle; the weights or graph are likely damaged"


class EngineInstallFailed(PackagerError):
    """An MNN engine could not be installed from PyPI into packager's engine cache (`engines check`; pip's last line is
    shown)."""

    exit_code = ENGINE_INSTALL_FAILED
    hint = "check that PyPI is reachable (pip's own settings apply) and that the folder is writable; rerun"


class ExtraNotInstalled(PackagerError):
    """The command needs packager's `[convert]` extra (torch, transformers, MNN, llmexport), which this install
    lacks (checked before any work)."""

    exit_code = EXTRA_NOT_INSTALLED
    hint = f"install it: pip install '{DISTRIBUTION}[convert]' (the distribution is {DISTRIBUTION})"


class NotEnoughMemory(PackagerError):
    """`pair` would need more memory than is available (checked before loading)."""

    exit_code = NOT_ENOUGH_MEMORY
    hint = (
        "convert the target to a 4-bit MNN bundle with `packager convert TARGET --out TARGET-4bit` "
        "(or pass an MNN folder llmexport made) and pair against that"
    )


class InitFileExists(PackagerError):
    """`packager init` would have to overwrite a file (all are named; nothing was written)."""

    exit_code = INIT_FILE_EXISTS
    hint = "packager init never overwrites a file: move it aside, or init another folder"


class InitTargetRefused(PackagerError):
    """`packager init`: DIR is a file, or is or lies inside the checkpoint or the adapter (also through a link)."""

    exit_code = INIT_TARGET_REFUSED
    hint = "init the release repository outside the checkpoint and the adapter (it may contain them)"


class MatrixInvalid(SpecError):
    """A matrix release spec (`[matrix]`) cannot be expanded into jobs: a bad axis, template or exclude, an
    expansion that is no valid release spec, or two jobs publishing to one repo (`plan`, `check-spec`,
    `release`)."""

    exit_code = MATRIX_INVALID
    hint = "packager check-spec SPEC names every problem of the matrix"


class MatrixJobsFailed(PackagerError):
    """A matrix release ran every job it could, and some failed (each named); the others are released. Run the
    same command again to retry only what is not released."""

    exit_code = MATRIX_JOBS_FAILED
    hint = "fix what the failed jobs say, then run the same release again: released jobs are not redone"


class MatrixBusy(PackagerError):
    """Another `release` of the same matrix is running on its run folder (its journal is held by one run)."""

    exit_code = MATRIX_BUSY
    hint = "wait for it to end (or stop it); a second run would only redo its jobs"


# Longest excerpt of any user-supplied value that a message shows.
MAX_SHOWN = 200


def shorten(value: object, limit: int = MAX_SHOWN) -> str:
    """`repr`-like text of a value, cut to `limit` characters with a note of how much was left out."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def printable(value: object) -> str:
    """Text with every control character and line or paragraph separator escaped (\\n, \\x1b, \\u2028), and the
    stand-ins of a path's undecodable bytes shown as the bytes (\\xff): a name shown on a terminal or written into
    a one-line comment can neither move the cursor nor start a new line, nor fail to encode."""
    import unicodedata

    def escaped(char: str) -> str:
        if 0xDC80 <= ord(char) <= 0xDCFF:  # surrogateescape's stand-in for the byte ord - 0xDC00
            return f"\\x{ord(char) - 0xDC00:02x}"
        return char.encode("unicode_escape", "backslashreplace").decode("ascii")

    return "".join(
        escaped(char) if unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp") else char for char in str(value)
    )


def control_character(text: str) -> str | None:
    """The first character of `text` that plain text of several lines must not hold: a control character other
    than a tab or a line end (ESC, BEL, NUL: a terminal showing the text would obey them), or a line or paragraph
    separator; None when there is none."""
    import unicodedata

    return next((c for c in text if c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp")), None)


def from_os_error(exc: OSError, doing: str = "") -> FileSystemError:
    """One line with the OS's own reason and the (shortened) path it concerns."""
    reason = exc.strerror or exc.__class__.__name__
    where = f" {shorten(str(exc.filename), 120)}" if exc.filename is not None else ""
    what = f"{doing}: " if doing else ""
    return FileSystemError(f"{what}{reason}{where}")


# EAGLE-3 heads (convert --eagle): each refusal happens before any conversion work.
class EagleHeadLayout(PackagerError):
    """`convert --eagle`: the head's layout is wrong (a tensor missing, misnamed or unexpected; no config.json or
    model.safetensors; an activation or rope scaling the exported head cannot hold)."""

    exit_code = EAGLE_HEAD_LAYOUT
    hint = (
        "pass an EAGLE-3 head in the SpecForge / AngelSlim layout (config.json and model.safetensors with fc, "
        "midlayer.*, norm, lm_head and d2t); a tensor llmexport does not find stays random without a word"
    )


class EagleHeadMismatch(PackagerError):
    """`convert --eagle`: the head does not fit the target (hidden size, head counts, head_dim, vocabulary, a tensor's
    shape)."""

    exit_code = EAGLE_HEAD_MISMATCH
    hint = "pass the head that was trained for this target (its config.json must describe the target's shape)"


class TargetTooShallow(PackagerError):
    """`convert --eagle`: the target has fewer than 7 layers."""

    exit_code = TARGET_TOO_SHALLOW
    hint = (
        "EAGLE-3 reads the inputs of target layers 2, N/2 and N-3, three distinct layers only when the "
        "target has at least 7 layers"
    )


class EagleVocabularyMap(PackagerError):
    """`convert --eagle`: `d2t` maps outside the target vocabulary, or `draft_vocab_size` exceeds it."""

    exit_code = EAGLE_VOCABULARY_MAP
    hint = "d2t must hold draft_vocab_size offsets, each mapping a draft id into the target's vocabulary"


class PickleHeadRefused(PackagerError):
    """`convert --eagle`: the head is a pickle (`pytorch_model.bin`) and `--allow-pickle-head` was not given."""

    exit_code = PICKLE_HEAD_REFUSED
    hint = (
        "pytorch_model.bin is a pickle, which can run code when loaded; convert it to model.safetensors, or "
        "pass --allow-pickle-head if you trust where it came from"
    )


class EagleHeadUnfaithful(PackagerError):
    """`convert --eagle`: the exported head does not compute what the checkpoint's head computes (nothing written)."""

    exit_code = EAGLE_HEAD_UNFAITHFUL
    hint = (
        "the exported head does not compute what the checkpoint computes; nothing was written (report this with "
        "--debug)"
    )


# DFlash drafts (convert --dflash): each refusal happens before any conversion work but the faithful check.
class DFlashDraftLayout(PackagerError):
    """`convert --dflash`: the draft's layout is wrong (no config.json, dflash_config or model.safetensors; a tensor
    missing, misnamed or unexpected; a block size, activation, rope or attention kind the exported graph cannot
    take)."""

    exit_code = DFLASH_DRAFT_LAYOUT
    hint = (
        "pass a DFlash draft in z-lab's DFlashDraftModel layout (config.json with block_size and dflash_config, "
        "model.safetensors with layers.N.*, norm, fc and hidden_norm); MNN's own exporter leaves a tensor it does "
        "not find random without a word"
    )


class DFlashDraftMismatch(PackagerError):
    """`convert --dflash`: the draft was made for another target (hidden size, heads, head_dim, vocabulary, depth,
    target_layer_ids outside its layers, a tensor's shape)."""

    exit_code = DFLASH_DRAFT_MISMATCH
    hint = "pass the DFlash draft trained for this target (its config names the target's shape)"


class DFlashMaskToken(PackagerError):
    """`convert --dflash`: the draft's mask token is missing, has no embedding row in the target, or is a token the
    tokenizer produces from ordinary text."""

    exit_code = DFLASH_MASK_TOKEN
    hint = "set dflash_config.mask_token_id to the id the draft was trained with (a special or unused row)"


class DFlashTargetRefused(PackagerError):
    """`convert --dflash`: the target's family has no DFlash export in packager, or the engine asked for reads
    another DFlash format than packager writes."""

    exit_code = DFLASH_TARGET_REFUSED
    hint = "convert a target of a family the message names, for MNN 3.6.x (pass --engine 3.6.1)"


class DFlashDraftUnfaithful(PackagerError):
    """`convert --dflash`: the exported DFlash draft's block logits differ from the checkpoint's draft (run in torch
    on the same inputs) by more than 8-bit rounding leaves; nothing is written."""

    exit_code = DFLASH_DRAFT_UNFAITHFUL
    hint = "report it with --debug's output: packager's DFlash graph does not compute this draft's architecture"


class DFlashTargetUnfaithful(PackagerError):
    """`convert --dflash`: the target graph's hidden states, which the DFlash draft reads, are not transformers'
    states after the layers the draft names (the target's own rounding aside); nothing is written."""

    exit_code = DFLASH_TARGET_UNFAITHFUL
    hint = "report it with --debug's output: packager's target graph does not expose the layers this draft reads"


# Lookahead corpora (convert --lookahead CORPUS): each refusal happens before any conversion work.
class CorpusUnusable(PackagerError):
    """`convert --lookahead CORPUS`: the corpus does not exist, is a folder, a device, pipe or socket, or lies inside
    `--out` (nothing written)."""

    exit_code = CORPUS_UNUSABLE
    hint = "pass a regular text file outside --out, or --lookahead alone to draft from the prompt's own n-grams"


class CorpusNotText(PackagerError):
    """`convert --lookahead CORPUS`: the corpus is empty, holds a NUL byte, is not UTF-8 text, or is larger than 8 MiB
    (nothing written)."""

    exit_code = CORPUS_NOT_TEXT
    hint = "pass UTF-8 text of at most 8 MiB: the text your users' prompts and answers repeat"


class ManifestError(BundleError):
    """The checksum manifest is malformed."""

    exit_code = MANIFEST_ERROR
    hint = "rewrite it with: packager checksum BUNDLE"


class CardError(PackagerError):
    """The model card template is broken or its front matter invalid, or a report given to the card is refused."""

    exit_code = CARD_ERROR
    hint = "fix the template or the spec field it names"


class ProvenanceUnusable(CardError):
    """The provenance record the card reads (`--provenance`, or BUNDLE.provenance.json beside the bundle) is not one
    `packager convert` wrote: unreadable, not UTF-8, not JSON, not an object, a field missing or of another type
    (exit 24, as a refused report)."""

    hint = "pass the BUNDLE.provenance.json packager convert wrote beside this bundle, or move the file aside"


class FamilyLicenseConflict(CardError):
    """The release spec contradicts the bundle's family: a license other than the family's (a Llama bundle carded
    apache-2.0), or another family's base model."""

    exit_code = FAMILY_LICENSE_CONFLICT


class HubError(PackagerError):
    """A transient failure (5xx, lost connection, exhausted retries): the only kind where rerunning helps."""

    exit_code = HUB_ERROR
    hint = "rerun the same command; what the Hub already has is not sent again"


class HubAuthError(HubError):
    """The Hub rejected the credentials (401), or a token holds anything but printable ASCII."""

    exit_code = HUB_AUTH_ERROR
    hint = "log in with `hf auth login` or set HF_TOKEN to a token with write access"


class HubForbidden(HubError):
    """The token may not write there (403)."""

    exit_code = HUB_FORBIDDEN
    hint = "use a token with write access to this repo (or a namespace you own)"


class HubNotFound(HubError):
    """Repo or revision not found (404)."""

    exit_code = HUB_NOT_FOUND
    hint = "check the repo id and revision (packager creates the repo on upload)"


class HubConflict(HubError):
    """Conflict (409/412): a tag on another commit, or the branch moved meanwhile; also a second pull into the same
    DIR."""

    exit_code = HUB_CONFLICT
    hint = "someone changed the repo meanwhile or the tag exists; check the remote and rerun"


class HubVerificationFailed(HubError):
    """The remote revision does not hold what was uploaded."""

    exit_code = HUB_VERIFICATION_FAILED
    hint = "the remote revision is not what was uploaded; run packager verify-remote and re-upload"


class HubRevisionRefused(HubError):
    """`--revision` is not a branch name (an existing tag, a commit id, an invalid ref); nothing was sent."""

    exit_code = HUB_REVISION_REFUSED
    hint = "--revision takes a branch name (new or existing); tags are made with --tag"


class HubVisibilityRefused(HubError):
    """`--private` but the repo exists and is public (use `--make-private`); nothing was sent."""

    exit_code = HUB_VISIBILITY_REFUSED
    hint = "make it private deliberately with --make-private (or on the Hub's settings page), then upload"


class HubBadTarget(HubError):
    """An invalid repo id or tag name, an endpoint that is no http(s) URL or no Hub, or a request the Hub refused as
    invalid (400/413/422); rerunning cannot help."""

    exit_code = HUB_BAD_TARGET
    hint = "fix the repo id or --endpoint (a Hub URL such as https://huggingface.co); rerunning cannot help"


class GatingFailed(PackagerError):
    """`gated` could not be set or did not take; nothing was committed."""

    exit_code = GATING_FAILED
    hint = "gating needs a token with write access to the repo (and, on the Hub, a plan that allows it); rerun"


class HubGated(HubError):
    """The repo is gated and the request has no token, or the token's user has not been granted access."""

    exit_code = HUB_GATED
    hint = (
        "the repo is gated: log in (hf auth login, HF_TOKEN or --token-file) as a user who has been granted "
        "access; ask for it on the repo's page"
    )


class CollectionNotUpdated(PackagerError):
    """The release is on the Hub, committed, verified and tagged, but its collection could not be updated (yet)."""

    exit_code = COLLECTION_NOT_UPDATED
    hint = "rerun the same command to finish: nothing is sent again and the repo is added to the collection once"
    upload: Any = None  # the verified UploadResult when this is raised after its commit (None: nothing was sent)


class CollectionForbidden(CollectionNotUpdated):
    """The collection belongs to another user, or its owner is a namespace the token's user may not write: refused
    before anything is sent; or the Hub refuses the collection after the commit (then committed and tagged,
    collection not updated)."""

    exit_code = COLLECTION_FORBIDDEN
    hint = (
        "set [release] collection_owner (upload --collection-owner) to a namespace this token may write, or ask "
        "the owner for write access, then rerun"
    )


class EngineTooOld(PackagerError):
    """`pull --engine`: the bundle needs a newer MNN engine than the app's (or declares none)."""

    exit_code = ENGINE_TOO_OLD
    hint = "update the app's MNN engine, or pull a release made for the engine you have (packager convert --engine)"


class PairIncompatible(PackagerError):
    """`pair`: the draft cannot serve the target (other family, vocabulary, special or stop tokens, template), or a
    folder is neither a checkpoint nor an MNN model."""

    exit_code = PAIR_INCOMPATIBLE
    hint = "a draft must share the target's tokenizer, vocabulary and chat template (same model family)"


class SpeculationUnavailable(PackagerError):
    """`speculate`: the bundle cannot run the mode in upstream MNN (none configured and no `--mode`, `draftmodel`,
    `--mode eagle` without a runnable EAGLE-3 head, an unreadable config.json)."""

    exit_code = SPECULATION_UNAVAILABLE
    hint = "convert with --eagle HEAD or --lookahead, or pass --mode lookahead (it needs no weights)"


class SpeculationNotLossless(PackagerError):
    """`speculate`: MNN's speculative generation emitted other tokens than its plain decoding, beyond near-ties (the
    report is printed first)."""

    exit_code = SPECULATION_NOT_LOSSLESS
    hint = "the head or the bundle computes something else than the target; do not ship it"


class VerifyFailed(PackagerError):
    """`verify` found the bundle below a threshold (the report is printed first)."""

    exit_code = VERIFY_FAILED
    hint = "the bundle does not behave like its source; reconvert (8-bit gives more headroom) or check the weights"


class SigningKeyInvalid(PackagerError):
    """Signing key: not a private key (a public key, a certificate, not PEM)."""

    exit_code = SIGNING_KEY_INVALID
    hint = "pass an EC private key in PEM (openssl ecparam -name prime256v1 -genkey -noout -out key.pem)"


class SigningKeyCurve(PackagerError):
    """Signing key or public key: not EC, or on a curve model-signing does not sign with (only P-256, P-384, P-521)."""

    exit_code = SIGNING_KEY_CURVE
    hint = "sign with an EC key on P-256 (prime256v1), P-384 or P-521"


class SigningKeyLocked(PackagerError):
    """Signing key: protected by a passphrase and none was given, or the passphrase does not unlock it."""

    exit_code = SIGNING_KEY_LOCKED
    hint = "put the key's passphrase in PACKAGER_SIGNING_KEY_PASSPHRASE or a file given with --passphrase-file"


class PublicKeyInvalid(SigningKeyInvalid):
    """A --public-key file that cannot be read or is larger than any key (exit 70, as a bad signing key)."""

    hint = "pass the publisher's key.pub"


class PassphraseFileUnusable(SigningKeyInvalid):
    """--passphrase-file cannot be read, or its first line is longer than any passphrase (exit 70, as a bad key)."""

    hint = "put the key's passphrase on the first line of a small text file"


class SignatureMalformed(PackagerError):
    """`model.sig` is not JSON, no sigstore bundle (its verificationMaterial naming neither a key nor a certificate),
    or larger than 1 MiB (not read)."""

    exit_code = SIGNATURE_MALFORMED
    hint = "model.sig is not a model-signing signature; sign the bundle again with packager sign"


class SigstoreFailed(PackagerError):
    """Keyless signing or verification could not be done: no OIDC identity, or sigstore's services (Fulcio,
    Rekor, the TUF trust root) out of reach."""

    exit_code = SIGSTORE_FAILED
    hint = (
        "keyless signing and verification need sigstore's services on the network (and, to sign, an OIDC "
        "identity: CI with `permissions: id-token: write`); or sign and verify with a key"
    )


class SignatureCoverage(PackagerError):
    """`model.sig` names a file the bundle or revision does not hold, or leaves one of its files out."""

    exit_code = SIGNATURE_COVERAGE
    hint = "the signature is not over this release's files; sign the released folder again with packager sign"


class SignatureUnsafePath(PackagerError):
    """`model.sig` names a path outside the flat bundle (`..`, `/`, absolute)."""

    exit_code = SIGNATURE_UNSAFE_PATH
    hint = "a signature naming paths outside the bundle folder is refused; do not use this release"


class SignatureUntrusted(PackagerError):
    """Not signed by whom you trust: another key or identity, a key-signed release checked keyless (or the reverse), or
    unsigned when a signature was required."""

    exit_code = SIGNATURE_UNTRUSTED
    hint = "check that you pass the publisher's public key (or sigstore identity and issuer) the card names"


class ContentMismatch(PackagerError):
    """A file differs from what `model.sig` signed or from its manifest line (`pull`, `verify-signature`, release's
    post-upload check), a file `verify-remote` finds not as signed, or `upload` found a `model.sig` that no longer
    matches the bundle; named."""

    exit_code = CONTENT_MISMATCH
    hint = "the files are not the ones the publisher released; do not use them, and tell the publisher"


class Unreadable(HubError):
    """A file that could not be read whole (exit 40, unlike a mismatch: exit 31)."""

    hint = "rerun later; if it persists, the Hub's copy is damaged: packager upload of the bundle sends it again"
