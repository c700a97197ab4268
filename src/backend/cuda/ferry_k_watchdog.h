/* The C launcher of ferry_k_watchdog.cu. */
#ifndef FERRY_K_WATCHDOG_H
#define FERRY_K_WATCHDOG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Queue the heartbeat kernel on @stream (a cudaStream_t): it stores @value at @word (a device
 * address of mapped host memory). Returns a cudaError_t as int. */
int ferry_k_heartbeat_launch(volatile uint64_t *word, uint64_t value, void *stream);

/* Load the heartbeat kernel now (lazy loading would at its first launch, which may wait for a
 * busy device). Returns a cudaError_t as int. */
int ferry_k_heartbeat_preload(void);

#ifdef __cplusplus
}
#endif
#endif
