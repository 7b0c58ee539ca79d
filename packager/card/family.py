"""What the card takes from the model's family: the license (the spec's, or the family's when the spec names none),
its attribution line and its license file, the tags, and the checks that keep a spec from contradicting them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import families
from ..bundle.kinds import LICENSE_FILE
from ..errors import CardError, FamilyLicenseConflict, shorten
from ..families import Family, UnknownFamily
from ..infra.jsonfile import read_json
from ..infra.userfile import LICENSE_BYTES, read_bytes
from ..spec.model import ReleaseSpec

# The Hub's id for a license it has no id for (Qwen2.5-3B's); other ids of the family's own terms are its
# License.aliases.
OTHER = "other"


@dataclass(frozen=True)
class CardLicense:
    spdx: str  # the card's `license`
    name: str  # as people call it, "" when the spec names a license the family does not know
    link: str  # where the family's license is read (also when the spec names another id of it)
    attribution: str  # "Built with Llama", shown at the top of the card; "" for none
    file: str | None  # the license file the bundle ships (LICENSE), None when it has none
    file_required: bool  # the license asks that a copy of it ship with the model
    notice: str = ""  # the notice the license asks every copy to carry

    def note(self) -> str:
        """The card's lines under its License heading: the notice and the license file (or its absence)."""
        lines = [self.notice] if self.notice else []
        if self.file is not None:
            required = ", as the license requires" if self.file_required else ""
            lines.append(f"`{self.file}` holds a copy of the license, shipped with the model{required}.")
        elif self.file_required:
            lines.append(
                f"The {self.name or self.spdx} asks that a copy of it ship with the model; this release carries "
                f"none: read it at {self.link}."
            )
        return "\n\n".join(lines)


def bundle_family(bundle: Path, llm_config: dict[str, Any]) -> Family:
    """The bundle's family, from its llm_config.json; CardError (one line) for a bundle of no family packager knows."""
    try:
        return families.of_bundle(llm_config, f"{shorten(str(bundle), 120)}/llm_config.json")
    except UnknownFamily as exc:
        raise CardError(
            str(exc), f"the card states the model's family and license; packager knows {families.supported()}"
        ) from None


def card_license(spec: ReleaseSpec, family: Family, bundle: Path) -> CardLicense:
    """The license the card states: the spec's `release.license`, else the family's; a spec that names another
    license than the family's weights carry is refused (FamilyLicenseConflict)."""
    own = family.license
    said = spec.need("release").license
    if said is not None and said != own.spdx and said != OTHER and said not in own.aliases:
        raise FamilyLicenseConflict(
            f"the release spec's license {shorten(said, 40)!r} contradicts the bundle's family: {family.title} "
            f"weights are released under {own.spdx} ({own.name})",
            f'set [release] license = "{own.spdx}" or leave it out (the card then takes the family\'s)',
        )
    spdx = said or own.spdx
    shipped = LICENSE_FILE if _regular(bundle / LICENSE_FILE) else None
    same = spdx == own.spdx
    return CardLicense(
        spdx=spdx,
        name=own.name if same else "",
        link=own.link,
        attribution=own.attribution,
        file=shipped,
        file_required=bool(own.file),
        notice=own.notice if spdx == own.spdx else "",
    )


def check_base_model(spec: ReleaseSpec, family: Family) -> None:
    """A base_model that is another family's released checkpoint is a spec written for another bundle."""
    base = spec.need("model").base_model
    for other in families.FAMILIES:
        if other is not family and base in other.base_models and base not in family.base_models:
            raise FamilyLicenseConflict(
                f"the release spec's base_model {shorten(base, 80)} is {other.title}, but the bundle is {family.title}",
                f"set [model] base_model to the {family.title} checkpoint it was converted from (e.g. "
                f"{family.base_models[0]})"
                if family.base_models
                else "set [model] base_model to its checkpoint",
            )


def ship_license(bundle: Path, spec: ReleaseSpec) -> str | None:
    """Put the checkpoint's license file into the bundle (a release file: checksummed and signed like the card)
    when the bundle has none and the spec's [convert] checkpoint holds one. Returns one line (what is missing and what
    to do) when the family's license asks for a copy with the model and none is at hand; None otherwise."""
    target = bundle / LICENSE_FILE
    if _regular(target) or not _regular(bundle / "llm_config.json"):  # a bundle without it: the card says so
        return None
    family = bundle_family(bundle, read_json(bundle / "llm_config.json", CardError))
    card_license(spec, family, bundle)  # a spec the card refuses leaves the bundle as it was
    check_base_model(spec, family)
    source = spec.convert.checkpoint
    # A checkpoint in Hugging Face's cache holds links to its blobs: the source's file may be one.
    found = next((source / name for name in _NAMES if source is not None and (source / name).is_file()), None)
    if found is not None:
        from ..bundle.staging import write_atomic

        data = read_bytes(found, LICENSE_BYTES, what="license file", unreadable=CardError, too_large=CardError)
        write_atomic(target, data)
        return None
    if not family.license.file:
        return None
    where = f"the checkpoint {shorten(str(source), 80)}" if source is not None else "a [convert] source"
    return (
        f"the {family.license.name} asks that a copy of it ship with the model, and neither the bundle nor {where} "
        f"has a {LICENSE_FILE} file: copy the checkpoint's {LICENSE_FILE} (or {family.license.link}) into "
        f"{shorten(str(bundle), 80)}"
    )


# The names a checkpoint's license file goes by (Meta's Llama repos: LICENSE.txt; Hugging Face repos: LICENSE).
_NAMES = ("LICENSE", "LICENSE.txt", "LICENSE.md")


def _regular(path: Path) -> bool:
    return os.path.isfile(path) and not os.path.islink(path)
