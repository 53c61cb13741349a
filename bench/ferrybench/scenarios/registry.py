"""The table of scenarios: each is a function from the Context to a ScenarioResult."""

from dataclasses import dataclass
from typing import Callable

SCENARIOS: dict[str, "Scenario"] = {}


@dataclass
class Scenario:
    """A named benchmark; `run` measures and returns a ScenarioResult."""

    name: str
    title: str
    run: Callable


def scenario(name: str, title: str):
    """Registers the decorated function as scenario `name`; registration order is run order."""

    def register(fn):
        SCENARIOS[name] = Scenario(name, title, fn)
        return fn

    return register
