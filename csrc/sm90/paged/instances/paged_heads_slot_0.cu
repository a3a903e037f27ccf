// The sm90 paged decode kernel instances of kServedPagedHeads[0] (capabilities.h): every served D,
// next_n and logits element (paged/launch_instance.cuh). One file per position of the list so that
// the JIT compiles the H in parallel; build_config compiles the first len(kServedPagedHeads) of them,
// so a new H needs no edit here.
#define AITER_SM90_INSTANCE_FILE
#define AITER_SM90_PAGED_INSTANCE_FILE
#define AITER_SM90_PAGED_HEADS_SLOT 0
#include "sm90/paged/launch_instance.cuh"
