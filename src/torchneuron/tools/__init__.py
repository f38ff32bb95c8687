"""Command-line tools: the OpInfo conformance sweep (``torchneuron conformance``)."""
