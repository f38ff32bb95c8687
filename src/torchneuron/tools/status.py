"""The conformance sweep's status vocabulary: what each status means, how they rank,
which ones are failures (the sweep, the gate, the baseline and the report use these)."""
from __future__ import annotations

# What each status means (reports and the baseline use these codes).
STATUSES = {
    "PASS": "ran natively (lowering or traced decomposition) and matched the CPU",
    "MISMATCH": "ran, but the values (or shape/dtype) differ from the CPU beyond tolerance",
    "ERROR": "raised on the neuron device (or crashed the worker) while the CPU did not",
    "FALLBACK": "matched the CPU, but at least one aten op ran through the CPU fallback",
    "TIMEOUT": "did not finish within the per-unit time limit",
    "UNSUPPORTED_DTYPE": "the OpInfo does not list this dtype for the CPU: nothing to compare with",
    "SKIP": "the CPU itself rejects every sample, or the op has no samples for this dtype",
}
# the order of the report's columns
ORDER = ["PASS", "FALLBACK", "MISMATCH", "ERROR", "TIMEOUT", "SKIP", "UNSUPPORTED_DTYPE"]
FAILED = ("MISMATCH", "ERROR", "TIMEOUT")
# rows that say something about the device
TESTED = ("PASS", "MISMATCH", "ERROR", "FALLBACK", "TIMEOUT")
# a unit's status from its samples': the worst one wins
PRECEDENCE = ["TIMEOUT", "ERROR", "MISMATCH", "FALLBACK", "PASS", "SKIP"]
# one-letter codes of the per-op table
CODE = {"PASS": "✓", "FALLBACK": "F", "MISMATCH": "M", "ERROR": "E", "TIMEOUT": "T", "SKIP": "s",
        "UNSUPPORTED_DTYPE": "·"}
