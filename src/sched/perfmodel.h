/* Per-device performance model for scheduling chunks over several devices (GPUs, the CPU as one
 * more slot): learnt online from chunk times, keyed by (device slot, stage id, size bucket),
 * robust to timing spikes (a trimmed window, after StarPU's history models and what went wrong
 * with them), with a choice helper (earliest expected finish, as StarPU's dmda), save and load
 * as JSON ("ferry-perfmodel-1") and a read-out. Every call returns 0 or a negative FERRY_* code.
 *
 * Keys. Device slots are 0..FERRY_PERF_DEVICES-1 (the caller's numbering; the CPU is just another
 * slot). Stage ids are small ints 0..FERRY_PERF_STAGES-1 given by the caller (a pipeline's stage
 * index, or one id per copy direction if transfers are modelled apart); names given with
 * ferry__perf_name_stage() are what a saved model is matched by. A chunk of B bytes (B >= 1)
 * falls in bucket floor(log2(B)).
 *
 * Estimate. Each key keeps its last FERRY_PERF_WINDOW samples as (ns, bytes). The estimate is
 * the mean of the middle half of the samples' ns per byte (trimming (n+1)/4 from each end: one
 * sample in four may be wild without moving it; 1-2 samples: the fastest, because an optimistic
 * estimate is corrected by the work it attracts and a pessimistic one starves the device of the
 * samples that would correct it), times the window's mean bytes. A lasting change of speed
 * holds the middle half, and so the estimate, after 3/4 of a window. A key without samples is
 * predicted from the nearest buckets of the same (device, stage) that have some: linearly in
 * bytes between a smaller and a larger one, or proportionally to bytes from one side.
 *
 * Threads. One mutex per model guards everything: recording (completion threads), predicting
 * and choosing (the submitter), saving and reading out may come from any thread at once. The
 * work under it is a sort of FERRY_PERF_WINDOW doubles at most; callbacks run without it. */
#ifndef FERRY_SCHED_PERFMODEL_H
#define FERRY_SCHED_PERFMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY_PERF_DEVICES 64 /* slots 0..63: a device set is a uint64_t mask */
#define FERRY_PERF_STAGES  64
#define FERRY_PERF_BUCKETS 64 /* floor(log2(bytes)) of a size_t */
#define FERRY_PERF_WINDOW  24 /* samples per key: 6 trimmed at each end */
#define FERRY_PERF_NAME    64 /* bytes of a device's or stage's name, NUL included */
/* A (device, stage) with fewer samples than this is uncalibrated: it is given chunks to explore,
 * at most FERRY_PERF_EXPLORE_MAX at a time without a sample back, and not compared on speed
 * (three samples: the median already ignores one first-launch outlier). */
#define FERRY_PERF_CALIBRATED  3
#define FERRY_PERF_EXPLORE_MAX 2

typedef struct ferry_perfmodel ferry_perfmodel_t;

/** An empty model: no names, no samples, no device excluded. Returns 0, FERRY_EINVAL (@p out
 *  NULL) or FERRY_ENOMEM; on error *out is untouched. */
int ferry__perf_create(ferry_perfmodel_t **out);
/** Free @p m; no thread may be inside a call on it. NULL is a no-op. */
void ferry__perf_destroy(ferry_perfmodel_t *m);

/** Name device slot @p dev (e.g. "NVIDIA H200 0000:17:00.0", "cpu"), or stage @p stage (e.g.
 *  "scale"); @p name is copied (truncated to FERRY_PERF_NAME - 1 bytes); NULL or "" unnames.
 *  A saved model's data applies only to slots and stages of the same name (ferry__perf_load).
 *  Returns 0 or FERRY_EINVAL (slot or id out of range). Thread-safe. */
int ferry__perf_name_device(ferry_perfmodel_t *m, int dev, const char *name);
int ferry__perf_name_stage(ferry_perfmodel_t *m, int stage, const char *name);

/** Record that a chunk of @p bytes of @p stage took @p ns on @p dev (ns > 0; a 0 is counted as
 *  1). Returns 0, FERRY_EINVAL (slot, id or bytes == 0) or FERRY_ENOMEM (the key's first
 *  sample, nothing recorded). Thread-safe. */
int ferry__perf_record(ferry_perfmodel_t *m, int dev, int stage, size_t bytes, uint64_t ns);

/** The expected time of a chunk of @p bytes of @p stage on @p dev into *ns (at least 1): from
 *  its bucket, else from the nearest buckets with data. Returns 0, FERRY_EAGAIN when the
 *  (device, stage) has no sample at any size (*ns untouched: the scheduler should explore), or
 *  FERRY_EINVAL. Whether the device is excluded does not matter here. Thread-safe. */
int ferry__perf_predict(ferry_perfmodel_t *m, int dev, int stage, size_t bytes, uint64_t *ns);

/** Take device @p dev out of the choice (failed, left the set), or back in. Either way its
 *  exploration count restarts (chunks it had been given to explore are not coming back).
 *  Returns 0 or FERRY_EINVAL. Thread-safe. */
int ferry__perf_exclude(ferry_perfmodel_t *m, int dev, bool excluded);
bool ferry__perf_is_excluded(ferry_perfmodel_t *m, int dev);

typedef struct ferry_perf_choice {
    int dev;            /* the slot chosen */
    uint64_t ns;        /* its expected time for the chunk; exploring: the slowest calibrated
                         * candidate's, as a guess to queue (0 when no candidate has data) */
    uint64_t finish_ns; /* queued_ns[dev] + ns */
    bool explore;       /* given to an uncalibrated device to learn its speed */
} ferry_perf_choice_t;

/** Choose the device of @p devices (a mask of slots; excluded ones are skipped) expected to
 *  finish a chunk of @p bytes of @p stage first, given @p queued_ns (indexed by slot,
 *  FERRY_PERF_DEVICES entries, read for the candidates only: the expected ns already committed
 *  to each device, which the caller adds choice.ns to and takes it off again at completion).
 *  Rule: an uncalibrated candidate (fewer than FERRY_PERF_CALIBRATED samples of the stage)
 *  with fewer than FERRY_PERF_EXPLORE_MAX explore chunks out is chosen first (the least queued
 *  such), its count of explore chunks out goes up and a sample of the stage brings it down;
 *  else the calibrated candidate with the least queued + predicted (ties: less queued, then the
 *  lower slot); if no candidate is calibrated, the uncalibrated one with the fewest explore
 *  chunks out (nothing better is known; only then may one exceed the limit). Returns 0,
 *  FERRY_ENODEV (no candidate left) or FERRY_EINVAL. Thread-safe. */
int ferry__perf_choose(ferry_perfmodel_t *m, int stage, size_t bytes, uint64_t devices,
                       const uint64_t *queued_ns, ferry_perf_choice_t *out);

/** One key of the model, for summaries, metrics and --json. */
typedef struct ferry_perf_entry {
    int dev, stage;
    unsigned bucket;
    const char *dev_name, *stage_name; /* "" when unnamed; valid during the callback */
    uint64_t bytes;                    /* the window's mean chunk size */
    double ns;                         /* the estimate for a chunk of that size */
    double gbps;                       /* bytes / ns */
    uint64_t count; /* samples ever recorded (a loaded model: the saved count plus new ones) */
} ferry_perf_entry_t;

/** Call @p cb for every key with samples, ordered by device, stage, bucket, on a snapshot
 *  taken under the lock (the callback runs without it and may call into the model). A non-zero
 *  return from @p cb stops the walk and is returned. Returns 0, that value, FERRY_EINVAL or
 *  FERRY_ENOMEM. Thread-safe. */
int ferry__perf_foreach(ferry_perfmodel_t *m, int (*cb)(const ferry_perf_entry_t *e, void *arg),
                        void *arg);

/** A decision on a device for a stage, taken by trying the set with and without it (a device
 *  set's CPU guard, src/pipeline/set_guard.h), kept with the model so that a later run starts
 *  decided. */
typedef struct ferry_perf_verdict {
    bool set;                       /* there is one */
    bool keep;                      /* the device stays in the set; false: it takes no work */
    double with_gbps, without_gbps; /* the set's rates with and without it (0: not measured) */
} ferry_perf_verdict_t;

/** Record the verdict on @p dev for @p stage (replacing any). Returns 0 or FERRY_EINVAL (slot or
 *  id out of range, a rate below 0 or NaN). Thread-safe. */
int ferry__perf_set_verdict(ferry_perfmodel_t *m, int dev, int stage, bool keep, double with_gbps,
                            double without_gbps);
/** The verdict on @p dev for @p stage into *out: returns 1 when there is one, 0 when not
 *  (out->set false), FERRY_EINVAL. Thread-safe. */
int ferry__perf_verdict(ferry_perfmodel_t *m, int dev, int stage, ferry_perf_verdict_t *out);

/** The model as JSON text into *json (owned by the caller: free()). Format:
 *  {"format": "ferry-perfmodel-1",
 *   "devices": [{"slot": 0, "name": "..."}],   every slot with a name or data
 *   "stages": [{"id": 0, "name": "..."}],      every stage with a name or data
 *   "entries": [{"device": 0, "stage": 0, "bucket": 22, "bytes": 4194304, "ns": 812345.5,
 *                "count": 240}],
 *   "verdicts": [{"device": 1, "stage": 0, "keep": 0, "with_gbps": 38.2,
 *                 "without_gbps": 44.9}]}     optional when loading (files before it)
 *  Returns 0, FERRY_EINVAL or FERRY_ENOMEM. Thread-safe. */
int ferry__perf_save(ferry_perfmodel_t *m, char **json);
/** Parse @p json strictly (unknown or duplicate key, wrong type, out of range, negative or zero
 *  time, a bucket that @c bytes does not fall in, an entry of an unlisted device or stage, two
 *  entries of one key: FERRY_EPARSE, the message naming @p what (a file name, for messages;
 *  NULL: "perf model"), the key and what is accepted; the model is then untouched), then apply
 *  it: an entry replaces the key's window with min(count, window) copies of its estimate and
 *  sets its count; a verdict replaces the (slot, stage)'s. A listed slot or stage applies when
 *  the model's name for it is the same, or the model has none (it takes the file's); otherwise
 *  its entries and verdicts are skipped, counted in *skipped (@p skipped may be NULL), so that
 *  a model saved on one GPU is never applied to another. Returns 0, FERRY_EPARSE,
 *  FERRY_EINVAL or FERRY_ENOMEM. Thread-safe. */
int ferry__perf_load(ferry_perfmodel_t *m, const char *json, const char *what, unsigned *skipped);
/** ferry__perf_save into @p path (written to PATH.tmp, then renamed over it) and
 *  ferry__perf_load from it. Add FERRY_EIO (the file could not be read or written). */
int ferry__perf_save_file(ferry_perfmodel_t *m, const char *path);
int ferry__perf_load_file(ferry_perfmodel_t *m, const char *path, unsigned *skipped);

#endif
