"""The doctor's checks of the packages hpsearch runs on: Lightning, Ray, Optuna and
optuna-dashboard, each installed and within hpsearch's requirements.

Pure module: the installed versions are read from the package metadata.
"""

from __future__ import annotations

from typing import Callable, Mapping

from hpsearch.tools.doctor_checks import FAIL, OK, WARN, Check

#: (check name, distribution, what to ``pip install``, whether a missing one fails).
PACKAGES = (
    ("lightning", "pytorch-lightning", "pytorch-lightning", True),
    ("ray", "ray", "ray[tune]", True),
    ("optuna", "optuna", "optuna", True),
    ("optuna-dashboard", "optuna-dashboard", "optuna-dashboard", False),
)


def requirements() -> dict[str, str]:
    """``{distribution: specifier}`` hpsearch was installed with (empty from a checkout
    that was never ``pip install``-ed)."""
    from importlib import metadata

    try:
        from packaging.requirements import InvalidRequirement, Requirement

        lines = metadata.requires("hpsearch") or []
    except (ImportError, metadata.PackageNotFoundError):
        return {}
    out = {}
    for line in lines:
        if ";" in line:  # extras (test, bench) are not needed to run
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        # Lower bounds first: ">=2.2,<3" reads better than SpecifierSet's "<3,>=2.2".
        out[req.name.lower()] = ",".join(sorted(
            (str(spec) for spec in req.specifier), key=lambda t: (not t.startswith(">"), t)))
    return out


def package_check(name: str, dist: str, pip_name: str, required: bool,
                  version: Callable[[str], str | None],
                  wanted: Mapping[str, str]) -> Check:
    """Whether ``dist`` is installed, at a version hpsearch accepts."""
    found = version(dist)
    if found is None:
        status = FAIL if required else WARN
        what = "is not installed" + ("" if required else
                                     ": `hpsearch dashboard` and the optuna-dashboard "
                                     "command need it")
        return Check(name, status, f"{dist} {what}", f"pip install {pip_name}")
    spec = wanted.get(dist.lower(), "")
    if spec:
        try:
            from packaging.specifiers import SpecifierSet

            ok = SpecifierSet(spec).contains(found, prereleases=True)
        except Exception:  # an odd local version string: do not guess
            ok = True
        if not ok:
            return Check(name, FAIL if required else WARN,
                         f"{dist} {found} is installed, but hpsearch needs {dist}{spec}",
                         f"pip install '{pip_name}{spec}'")
    return Check(name, OK, f"{dist} {found}" + (f" (hpsearch needs {spec})" if spec else ""))


def installed_version(dist: str) -> str | None:
    """The installed version of the distribution ``dist``, or None when it is not."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
