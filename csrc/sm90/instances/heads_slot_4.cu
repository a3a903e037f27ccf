// The sm90 prefill kernel instances of kServedHeads[4] (capabilities.h): every served D and logits
// format (launch_instance.cuh). One file per position of the list so that the JIT compiles the H in
// parallel; build_config compiles the first len(kServedHeads) of them, so a new H needs no edit here.
#define AITER_SM90_INSTANCE_FILE
#define AITER_SM90_HEADS_SLOT 4
#include "sm90/launch_instance.cuh"
