// sets/graph_record.h — graphs for a set that has none (the CPU sets): a wrapper whose
// graph_capture records the ops it is called with, their arguments copied as they are, and
// whose graph_launch replays them in order on the set it wraps. A replay freezes what a CUDA
// graph freezes (every pointer and size of every call), so an engine whose graph steps lean on
// something that changes between steps of one bucket goes wrong here too, on any machine; and
// what a capture must not do (a copy to or from the host, a wait) exits here as it fails on a
// GPU. Collectives are recorded too (graph_collectives): a tensor-parallel rank's steps replay.
#ifndef INVAR_SETS_GRAPH_RECORD_H
#define INVAR_SETS_GRAPH_RECORD_H

#include "../kernels/ops.h"  // ops_set

// A set that computes as `inner` and has graphs; destroying it destroys inner.
ops_set *graph_record_wrap(ops_set *inner);

// What cuda_graphs = on runs a set as: a CPU set without graphs wrapped (graph_record_wrap);
// any other as it is (a CUDA set has its own graphs; a CUDA plugin set, which has none, runs
// its padded steps call by call rather than replay a plugin's recorded launches).
ops_set *graph_record_on_cpu(ops_set *ops);

#endif
