"""What an ACP agent offers to switch (modes, models, config options) and its slash commands, as
the host last heard of them; pure, no I/O.

`Settings.snapshot()` is the `settings` session event every surface shows (docs/agents.md):
`modes` and `models` are `{"current": id, "available": [{"id", "name", "description"}]}` or
None, `config_options` the agent's options as it lists them. Modes and models come from the
agent's own `modes` and (unstable) `models`, or else from a config option of category `mode` or
`model`, so a surface needs only `modes` and `models` for the common case.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from acp import schema

from .acp_modes import approval
from .acp_updates import clip_text
from .errors import SessionError

MAX_CHOICES = 256
"""Modes, models, config options, option values and commands kept of each list."""

MAX_TEXT = 1024
"""Characters kept of a name, a description or a hint."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """How to ask the agent for a change: which method, with what."""

    method: Literal["set_mode", "set_model", "set_config"]
    target: str
    """The mode or model id, or the config option's id."""
    value: str | bool = ""
    """The config option's new value (set_config only)."""
    about: Literal["mode", "model", "config"] = "config"
    """What the person asked to change (a mode may be changed through a config option)."""

    def record(self) -> dict[str, Any]:
        """The `change` of the `settings` event: `{"mode": id}`, `{"model": id}` or
        `{"config": {"id", "value"}}`."""
        if self.about == "config":
            return {"config": {"id": self.target, "value": self.value}}
        return {self.about: self.value if self.method == "set_config" else self.target}


def _text(value: Any) -> str | None:
    return clip_text(value, MAX_TEXT) if isinstance(value, str) else None


def _choice(id_: str, name: str, description: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": clip_text(id_, MAX_TEXT), "name": _text(name) or id_}
    if description:
        entry["description"] = _text(description)
    return entry


def _option(
    option: schema.SessionConfigOptionSelect | schema.SessionConfigOptionBoolean,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": clip_text(option.id, MAX_TEXT),
        "name": _text(option.name) or option.id,
        "type": option.type,
        "current_value": option.current_value,
    }
    if option.description:
        data["description"] = _text(option.description)
    if isinstance(option.category, str):
        data["category"] = option.category
    if isinstance(option, schema.SessionConfigOptionSelect):
        values: list[dict[str, Any]] = []
        for entry in option.options:
            if isinstance(entry, schema.SessionConfigSelectGroup):
                values.extend(
                    {**_choice(o.value, o.name, o.description), "group": _text(entry.name)}
                    for o in entry.options
                )
            else:
                values.append(_choice(entry.value, entry.name, entry.description))
        data["options"] = values[:MAX_CHOICES]
    return data


def _raw_models(raw: Any) -> dict[str, Any] | None:
    """The unstable `models` field of a session/new or session/load result, checked."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("currentModelId"), str):
        return None
    available = raw.get("availableModels")
    entries = [
        _choice(m["modelId"], str(m.get("name") or m["modelId"]), m.get("description"))
        for m in (available if isinstance(available, list) else [])
        if isinstance(m, Mapping) and isinstance(m.get("modelId"), str)
    ]
    return {"current": raw["currentModelId"], "available": entries[:MAX_CHOICES]}


class Settings:
    """An agent session's modes, models, config options and commands."""

    def __init__(self) -> None:
        self._modes: dict[str, Any] | None = None
        self._models: dict[str, Any] | None = None
        self._options: list[dict[str, Any]] | None = None
        self.commands: list[dict[str, Any]] = []
        """The agent's slash commands: `name`, `description`, and `hint` when it takes input."""

    # -- what the agent says -------------------------------------------------------------------

    def start(
        self,
        modes: schema.SessionModeState | None,
        config_options: Sequence[Any] | None,
        raw_result: Any,
    ) -> None:
        """The state a session/new or session/load response gives (its raw result for `models`)."""
        self._modes = None
        if modes is not None:
            self._modes = {
                "current": modes.current_mode_id,
                "available": [_choice(m.id, m.name, m.description) for m in modes.available_modes][
                    :MAX_CHOICES
                ],
            }
        raw = raw_result if isinstance(raw_result, Mapping) else {}
        self._models = _raw_models(raw.get("models"))
        self.set_config_options(config_options)

    def set_mode(self, mode_id: str) -> None:
        if self._modes is not None:
            self._modes = {**self._modes, "current": mode_id}

    def set_model(self, model_id: str) -> None:
        if self._models is not None:
            self._models = {**self._models, "current": model_id}

    def set_config_options(self, options: Sequence[Any] | None) -> None:
        if options is None:
            return
        self._options = [_option(o) for o in options[:MAX_CHOICES]]

    def set_commands(self, commands: Sequence[schema.AvailableCommand]) -> None:
        kept: list[dict[str, Any]] = []
        for command in commands[:MAX_CHOICES]:
            entry: dict[str, Any] = {
                "name": clip_text(command.name, MAX_TEXT),
                "description": _text(command.description) or "",
            }
            hint = getattr(getattr(command.input, "root", None), "hint", None)
            if isinstance(hint, str):
                entry["hint"] = _text(hint)
            kept.append(entry)
        self.commands = kept

    # -- what the surfaces show ----------------------------------------------------------------

    @property
    def known(self) -> bool:
        """Whether the agent offers anything to switch."""
        return bool(self._modes or self._models or self._options)

    def snapshot(self) -> dict[str, Any]:
        """`modes`, `models`, `config_options` and `approval` (whether the current mode asks,
        in words: tunnel.agents.acp_modes), as the `settings` session event has them."""
        modes = self._modes or self._from_option("mode")
        return {
            "modes": modes,
            "models": self._models or self._from_option("model"),
            "config_options": self._options,
            "approval": approval(modes),
        }

    def choices(self) -> dict[str, Any]:
        """What is chosen now: `mode` and `model` ids (or None), and `config`, the current value
        of each config option that is not the mode or the model."""
        snapshot = self.snapshot()
        return choices_of(snapshot)

    def _from_option(self, category: str) -> dict[str, Any] | None:
        option = self._option_of(category)
        if option is None:
            return None
        return {
            "current": option["current_value"],
            "available": [
                {k: v for k, v in o.items() if k in ("id", "name", "description")}
                for o in option.get("options", [])
            ],
        }

    def _option_of(self, category: str) -> dict[str, Any] | None:
        for option in self._options or ():
            if option.get("category") == category and option["type"] == "select":
                return option
        return None

    # -- what a driver asks --------------------------------------------------------------------

    def mode_change(self, mode_id: str) -> Change:
        """How to switch to `mode_id`; SessionError if the agent offers no such mode."""
        if self._modes is not None:
            if _offers(self._modes, mode_id):
                return Change(method="set_mode", target=mode_id, about="mode")
            if self._option_of("mode") is None:
                raise SessionError("unknown_request", f"the agent offers no mode {mode_id!r}")
        return self._by_option("mode", mode_id)

    def model_change(self, model_id: str) -> Change:
        """How to switch to `model_id`; SessionError if the agent offers no such model.

        A config option of category `model` (the stable protocol) is preferred to the
        unstable session/set_model."""
        option = self._option_of("model")
        if option is not None or self._models is None:
            return self._by_option("model", model_id)
        if not _offers(self._models, model_id):
            raise SessionError("unknown_request", f"the agent offers no model {model_id!r}")
        return Change(method="set_model", target=model_id, about="model")

    def config_change(self, config_id: str, value: str | bool) -> Change:
        """How to set a config option; SessionError for an unknown option or a wrong value."""
        option = next((o for o in self._options or () if o["id"] == config_id), None)
        if option is None:
            raise SessionError("unknown_request", f"the agent has no config option {config_id!r}")
        if option["type"] == "boolean":
            if not isinstance(value, bool):
                raise SessionError("bad_request", f"{config_id} takes true or false")
        elif option["type"] == "select" and (
            not isinstance(value, str) or value not in [o["id"] for o in option["options"]]
        ):
            raise SessionError("unknown_request", f"{config_id} has no value {value!r}")
        # The mode as a config option (as Codex offers it) is a mode: checked like one.
        about: Literal["mode", "config"] = "mode" if option.get("category") == "mode" else "config"
        return Change(method="set_config", target=config_id, value=value, about=about)

    def _by_option(self, category: Literal["mode", "model"], value: str) -> Change:
        option = self._option_of(category)
        if option is None:
            raise SessionError("not_supported", f"the agent offers no {category} to choose")
        change = self.config_change(option["id"], value)
        return Change(method=change.method, target=change.target, value=value, about=category)


def _offers(state: Mapping[str, Any], id_: str) -> bool:
    return any(entry.get("id") == id_ for entry in state.get("available", ()))


def choices_of(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """`Settings.choices()` of a recorded `settings` event's data."""
    found: dict[str, Any] = {"mode": None, "model": None, "config": {}}
    for key in ("mode", "model"):
        state = snapshot.get(f"{key}s")
        if isinstance(state, Mapping) and isinstance(state.get("current"), str):
            found[key] = state["current"]
    for option in snapshot.get("config_options") or ():
        if not isinstance(option, Mapping) or option.get("category") in ("mode", "model"):
            continue
        value = option.get("current_value")
        if isinstance(option.get("id"), str) and isinstance(value, str | bool):
            found["config"][option["id"]] = value
    return found
