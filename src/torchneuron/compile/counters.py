"""Counters of the neuron compile backend (``torchneuron.compile.stats()``)."""
from __future__ import annotations

import collections


class _Stats:
    def __init__(self):
        self.reset()

    def reset(self):
        self.graphs = 0            # FX graphs handed to the backend (fw/bw/inference)
        self.compilations = 0      # XLA executables built
        self.recompilations = 0    # of which for a new input signature of a known graph
        self.cache_hits = 0        # calls served by an already built executable
        self.evictions = 0
        self.compile_time_s = 0.0  # trace + lower + XLA compile
        self.split_graphs = 0      # graphs with nodes that run eagerly
        self.eager_nodes = collections.Counter()  # op -> nodes run eagerly in split graphs
        self.disk_cache_hits = 0   # executables loaded from the persistent cache
        self.dynamo_graphs = 0     # graphs Dynamo captured (before AOTAutograd)
        self.donations_skipped = 0  # calls that could not donate (a buffer shared by storages)
        self.bucketed_graphs = 0   # graphs with symbolic sizes run in shape buckets
        self.unbucketed_graphs = 0  # inference graphs with symbolic sizes compiled per shape
        self.bucket_calls = 0      # calls run in a bucket (inputs padded, outputs cut)

    def as_dict(self):
        return {
            "dynamo_graphs": self.dynamo_graphs,
            "graphs": self.graphs,
            "compilations": self.compilations,
            "recompilations": self.recompilations,
            "cache_hits": self.cache_hits,
            "evictions": self.evictions,
            "compile_time_s": round(self.compile_time_s, 4),
            "split_graphs": self.split_graphs,
            "eager_nodes": dict(self.eager_nodes),
            "disk_cache_hits": self.disk_cache_hits,
            "donations_skipped": self.donations_skipped,
            "bucketed_graphs": self.bucketed_graphs,
            "unbucketed_graphs": self.unbucketed_graphs,
            "bucket_calls": self.bucket_calls,
        }


STATS = _Stats()
