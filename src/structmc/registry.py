"""Name -> entry tables shared by the Python API and the command line.

structmc keeps one :class:`Registry` for each kind of named thing:

==================================  ===================================================
``structmc.samplers.SAMPLERS``      sampler classes (``sampler_from_config``)
``structmc.models.MODELS``          :class:`~structmc.models.ModelSpec` s (``build_model``)
``structmc.data.DATASETS``          :class:`~structmc.data.DatasetSpec` s (``load``)
``structmc_papers.REGISTRY``        experiment records of the papers' reproductions (the
                                    companion package in ``papers/``, not part of the library)
==================================  ===================================================

A registry is a read-only mapping (``names()``, iteration, ``in``, ``len``) with a
:meth:`Registry.get` that fails with a message listing the choices, and
:meth:`Registry.register` for entries of your own::

    from structmc.samplers import SAMPLERS, SGLD

    @SAMPLERS.register("my_sgld")
    class MySGLD(SGLD):
        ...

after which ``sampler_from_config({"name": "my_sgld", "lr": 1e-4})`` and
``structmc sample --sampler my_sgld`` (in the same process, e.g. ``structmc.cli.main([...])``)
find it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_MISSING: Any = object()


class UnknownNameError(KeyError, ValueError):
    """A name that is not in a registry. Both a ``KeyError`` (mapping look-ups) and a
    ``ValueError`` (a configuration error, reported in one line by the CLI)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class Registry(Mapping, Generic[T]):
    """An ordered table ``name -> entry`` for one ``kind`` of thing (``"sampler"``, ...).

    ``aliases`` maps other spellings to registered names; ``normalize`` (e.g. lower case)
    is tried when a name is not found as given; ``validate(name, entry)`` checks (and may
    convert) every entry on registration and returns the entry to store.
    """

    def __init__(
        self,
        kind: str,
        entries: Mapping[str, T] | Iterable[tuple[str, T]] = (),
        *,
        aliases: Mapping[str, str] | None = None,
        normalize: Callable[[str], str] | None = None,
        validate: Callable[[str, Any], T] | None = None,
    ):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}
        self._normalize = normalize
        self._validate = validate
        items = entries.items() if isinstance(entries, Mapping) else entries
        for name, entry in items:
            self.register(name, entry)
        for alias, target in (aliases or {}).items():
            self.add_alias(alias, target)

    # -- look-up ------------------------------------------------------------------------------
    def resolve(self, name: str) -> str:
        """The registered name that ``name`` stands for (itself, an alias or a normalised
        spelling); :class:`UnknownNameError` listing the choices when there is none."""
        found = self._find(name)
        if found is None:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; choose from {', '.join(self.choices())}")
        return found

    def _find(self, name) -> str | None:
        if not isinstance(name, str):
            return None
        candidates = [name]
        if self._normalize is not None:
            candidates.append(self._normalize(name))
        for c in candidates:
            if c in self._entries:
                return c
            if c in self._aliases:
                return self._aliases[c]
        return None

    def get(self, name: str, default: Any = _MISSING) -> T:
        """The entry called ``name``; without ``default``, an unknown name raises
        :class:`UnknownNameError` (a ``ValueError`` and a ``KeyError``) listing the choices."""
        found = self._find(name)
        if found is None:
            if default is not _MISSING:
                return default
            found = self.resolve(name)  # raises with the list of choices
        return self._entries[found]

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return self._find(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def names(self) -> list[str]:
        """Registered names, in registration order (aliases excluded)."""
        return list(self._entries)

    def choices(self) -> list[str]:
        """Registered names, sorted (what error messages list)."""
        return sorted(self._entries)

    @property
    def aliases(self) -> dict[str, str]:
        return dict(self._aliases)

    # -- registration -------------------------------------------------------------------------
    def register(self, name: str, entry: Any = _MISSING, *, overwrite: bool = False, aliases: Iterable[str] = ()):
        """Add ``entry`` under ``name`` (and ``aliases``). Without ``entry``, a decorator:
        ``@registry.register("name")``. An existing name is an error unless ``overwrite``."""
        if entry is _MISSING:

            def decorator(obj):
                self.register(name, obj, overwrite=overwrite, aliases=aliases)
                return obj

            return decorator
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        if not overwrite and (name in self._entries or name in self._aliases):
            raise ValueError(f"{self.kind} {name!r} is already registered (pass overwrite=True to replace it)")
        if self._validate is not None:
            entry = self._validate(name, entry)
        self._aliases.pop(name, None)
        self._entries[name] = entry
        for alias in aliases:
            self.add_alias(alias, name, overwrite=overwrite)
        return entry

    def add_alias(self, alias: str, name: str, *, overwrite: bool = False) -> None:
        if name not in self._entries:
            raise UnknownNameError(f"cannot alias {alias!r} to unknown {self.kind} {name!r}")
        if not overwrite and (alias in self._entries or alias in self._aliases):
            raise ValueError(f"{self.kind} {alias!r} is already registered")
        self._aliases[alias] = name

    def unregister(self, name: str) -> T:
        """Remove ``name`` (and the aliases pointing to it); returns its entry."""
        key = self.resolve(name)
        self._aliases = {a: n for a, n in self._aliases.items() if n != key}
        return self._entries.pop(key)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"


__all__ = ["Registry", "UnknownNameError"]
