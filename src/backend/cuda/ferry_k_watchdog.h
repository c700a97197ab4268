/* The C launchers of ferry_k_watchdog.cu. */
#ifndef FERRY_K_WATCHDOG_H
#define FERRY_K_WATCHDOG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Queue the heartbeat kernel on @stream (a cudaStream_t): it stores @value at @word (a device
 * address of mapped host memory). Returns a cudaError_t as int. */
int ferry_k_heartbeat_launch(volatile uint64_t *word, uint64_t value, void *stream);

/* Queue a kernel on @stream that stores the GPU's clock (%globaltimer, ns) at @word (a device
 * address of mapped host memory). Returns a cudaError_t as int. */
int ferry_k_clock_stamp_launch(volatile uint64_t *word, void *stream);

/* Load the heartbeat and clock-stamp kernels now (lazy loading would at its first launch, which may
 * wait for a busy device). Returns a cudaError_t as int. */
int ferry_k_heartbeat_preload(void);

#ifdef __cplusplus
}
#endif
#endif
