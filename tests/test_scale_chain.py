"""``jaxconv._scale_chain.scaled_chain`` on a toy IR: values are names, ops a dict, constants numbers."""

from __future__ import annotations

from jaxconv._scale_chain import scaled_chain

OPS = {
    "y": ("neg", ["a"]),
    "a": ("mul", ["half", "b"]),     # constant on the left
    "b": ("div", ["c", "two"]),      # division by a constant
    "c": ("mul", ["x", "three"]),    # constant on the right
    "z": ("div", ["two", "x"]),      # a constant divided by x: not a scale of x
    "w": ("div", ["x", "zero"]),     # division by zero: the walk stops
    "u": ("mul", ["x", "x"]),
}
CONSTANTS = {"half": 0.5, "two": 2.0, "three": 3.0, "zero": 0.0}


def _chain(value, limit=4):
    return scaled_chain(value, lambda v: OPS.get(v), CONSTANTS.get, limit)


def test_negations_products_and_quotients_multiply_the_scale():
    assert _chain("y") == [("y", 1.0), ("a", -1.0), ("b", -0.5), ("c", -0.25), ("x", -0.75)]


def test_the_walk_stops_at_the_limit_and_at_other_ops():
    assert _chain("y", limit=2) == [("y", 1.0), ("a", -1.0), ("b", -0.5)]
    assert _chain("u") == [("u", 1.0)]
    assert _chain("z") == [("z", 1.0)]
    assert _chain("w") == [("w", 1.0)]
