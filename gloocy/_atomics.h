/* Atomics on memory shared between processes (the shared-memory rings of
   transport/_shm.pyx and the node segment of _node.pxi). A writer publishes
   a position or phase with release order; a sleeper and a waker need a full
   fence between "I sleep" and "is there work" on both sides. */
#include <stdint.h>

static inline uint64_t ring_load(const uint64_t *p)
{ return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

static inline void ring_store(uint64_t *p, uint64_t v)
{ __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static inline void ring_fence(void)
{ __atomic_thread_fence(__ATOMIC_SEQ_CST); }

static inline void flag_set(uint32_t *p, uint32_t v)
{ __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }

/* Clear the flag; true if it was set (then we owe the sleeper a wake-up). */
static inline int flag_take(uint32_t *p)
{ return __atomic_load_n(p, __ATOMIC_RELAXED) && __atomic_exchange_n(p, 0, __ATOMIC_ACQ_REL); }

static inline uint32_t u32_load(const uint32_t *p)
{ return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
