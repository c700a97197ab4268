/* `ferry run`'s report: the summary it prints (text, or one JSON object with --json), with the
 * run's rates and what bound it, and the HTML page of --report (report.c draws it): a timeline
 * of the first chunks from the op trace, engine utilisation, and the summary as a table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "report.h"
#include "run.h"
#include "run_io.h"

/* The run's two rates and what held it (docs/metrics.md, "What bounds a run"). */
typedef struct run_bound {
    double transport_gbps; /* the run's bytes over first H2D start to last D2H end (device) */
    double e2e_gbps;       /* over the wall time from the first batch submitted (its input read
                              or taken from the generated pool) to the last verified or written */
    double verify_busy;    /* the verifiers' time checking over theirs in the run (0..1) */
    double verify_wait;    /* share of the wall time submission waited on verification */
    double read_share;     /* share of the wall time submission spent reading --input */
    double write_share;    /* share of it submission waited for --output's writes */
    const char *bound;     /* link, kernel, verification, storage, host or simulator */
    char why[200];
    const char *device_bound; /* what held the device's part: kernel or link */
    run_predict_t predict;    /* on the simulator: the run on the profile's host */
} run_bound_t;

/* The rule, first match wins: storage (reading --input took at least half of the run, and more
 * than the verifiers' busy share); verification (the verifiers busy 90% of their time, or
 * submission waited 10% of the run for them); simulator (the simulated device's work runs on
 * this CPU: its wall time is not the device's); host (end to end under 90% of transport,
 * neither reading nor verification to blame); kernel (compute busy 90% of the transport time
 * and more than either copy engine); else link. */
static void find_bound(const run_outcome_t *o, bool simulated, run_bound_t *b)
{
    const ferry_pipeline_stats_t *s = o->s;
    /* the bytes that completed: a run stopped by a signal moved fewer than it planned */
    double el = (double)s->elapsed_ns / 1e9, wall = o->wall_s, bytes = (double)o->t->done_bytes;
    *b = (run_bound_t){0};
    b->transport_gbps = el > 0 ? bytes / el / 1e9 : 0;
    b->e2e_gbps = wall > 0 ? bytes / wall / 1e9 : 0;
    if (wall > 0 && o->verifiers > 0)
        b->verify_busy = (double)o->t->verify_ns / 1e9 / (o->verifiers * wall);
    if (wall > 0 && o->st != NULL) {
        b->verify_wait = (double)o->st->verify_wait_ns / 1e9 / wall;
        b->read_share = (double)o->st->read_ns / 1e9 / wall;
        b->write_share = (double)o->st->write_wait_ns / 1e9 / wall;
    }
    double u_c = el > 0 ? (double)s->busy_compute_ns / 1e9 / el : 0;
    double u_copy =
        el > 0
            ? (double)(s->busy_h2d_ns > s->busy_d2h_ns ? s->busy_h2d_ns : s->busy_d2h_ns) / 1e9 / el
            : 0;
    bool kernel = u_c >= 0.9 && u_c > u_copy;
    b->device_bound = kernel ? "kernel" : "link";
    double storage = b->read_share + b->write_share;
    if (storage >= 0.5 && storage >= b->verify_busy) {
        b->bound = "storage";
        snprintf(b->why, sizeof(b->why),
                 "reading --input took %.0f%% of the run, waiting for --output's writes %.0f%%",
                 b->read_share * 100, b->write_share * 100);
    } else if (b->verify_busy >= 0.9 || b->verify_wait >= 0.1) {
        b->bound = "verification";
        snprintf(b->why, sizeof(b->why),
                 "the %u verifier(s) were busy %.0f%% of the run; submission waited %.0f%% of it "
                 "for them",
                 o->verifiers, b->verify_busy * 100, b->verify_wait * 100);
    } else if (simulated) {
        b->bound = "simulator";
        snprintf(b->why, sizeof(b->why),
                 "the simulated device's copies and kernels run on this CPU: end to end is wall "
                 "time, transport virtual");
    } else if (b->e2e_gbps < 0.9 * b->transport_gbps) {
        b->bound = "host";
        snprintf(b->why, sizeof(b->why),
                 "end to end %.0f%% of transport, and neither reading nor verification waited",
                 b->e2e_gbps / b->transport_gbps * 100);
    } else {
        b->bound = b->device_bound;
        snprintf(b->why, sizeof(b->why), "%s busy %.0f%% of the transport time",
                 kernel ? "compute" : "copies", (kernel ? u_c : u_copy) * 100);
    }
}

/* The summary's rates, what bound the run and, on the simulator, the prediction. */
static void print_rates(const run_bound_t *b, bool simulated)
{
    printf("  rates      transport %.1f GB/s%s (first H2D to last D2H), end to end %.1f GB/s "
           "(wall)\n",
           b->transport_gbps, simulated ? " (simulated)" : "", b->e2e_gbps);
    printf("  bound      %s: %s", b->bound, b->why);
    if (b->predict.have)
        printf("\n  predicted  %.1f GB/s end to end on the profile's host, bound by %s: %s",
               b->predict.gbps, b->predict.bound, b->predict.why);
    else if (simulated)
        printf("\n  predicted  no end-to-end figure: the profile does not model its host "
               "(section host_memory, docs/simulator.md)");
}

/* A set of devices: each one's bytes, share, parts, the scheduler's rate, and whether it
 * left (text, or the "devices" array in --json). A pipeline of one device prints nothing. */
static void print_devices(ferry_pipeline_t *pl, json_t *j)
{
    unsigned n = ferry_pipeline_devices(pl);
    if (n < 2)
        return;
    if (j != NULL) {
        json_key(j, "devices");
        json_array_begin(j);
    }
    for (unsigned i = 0; i < n; i++) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        if (ferry_pipeline_device_stats(pl, i, &d) != 0)
            continue;
        double gbps = d.stats.elapsed_ns > 0 ? (double)d.bytes / (double)d.stats.elapsed_ns : 0;
        if (j != NULL) {
            json_object_begin(j);
            json_key_int(j, "index", d.index);
            json_key_str(j, "name", d.name);
            json_key_uint(j, "bytes", d.bytes);
            json_key_double(j, "share", d.share, 4);
            json_key_uint(j, "parts", d.parts);
            json_key_uint(j, "parts_cpu", d.parts_cpu);
            json_key_uint(j, "bytes_moved", d.bytes_moved);
            json_key_uint(j, "bytes_stolen", d.bytes_stolen);
            json_key_double(j, "gbps", gbps, 3);
            json_key_double(j, "model_gbps", d.model_gbps, 3);
            json_key_bool(j, "left", d.left);
            json_key_str(j, "left_why", d.why);
            json_key_str(j, "note", d.note);
            json_object_end(j);
        } else {
            char b[32], idx[16], fb[48] = "", m[64] = "", st[64] = "";
            if (d.index == FERRY_DEVICE_CPU)
                snprintf(idx, sizeof(idx), "cpu");
            else
                snprintf(idx, sizeof(idx), "%d", d.index);
            if (d.index != FERRY_DEVICE_CPU) /* a GPU's parts its CPU fallback finished */
                snprintf(fb, sizeof(fb), " (%llu on the CPU)", (unsigned long long)d.parts_cpu);
            if (d.bytes_moved > 0) {
                char mb[32];
                snprintf(m, sizeof(m), "; %s moved to other devices",
                         cli_bytes(d.bytes_moved, mb, sizeof(mb)));
            }
            if (d.bytes_stolen > 0) {
                char sb[32];
                snprintf(st, sizeof(st), "; took %s of the CPU's queue",
                         cli_bytes(d.bytes_stolen, sb, sizeof(sb)));
            }
            printf("  device %-3s %s: %s, %.1f%% of the bytes, %.1f GB/s, %llu part(s)%s, model "
                   "%.1f GB/s%s%s%s%s%s%s\n",
                   idx, d.name, cli_bytes(d.bytes, b, sizeof(b)), d.share * 100, gbps,
                   (unsigned long long)d.parts, fb, d.model_gbps, d.left ? "; left the set: " : "",
                   d.why, m, st, d.note[0] != '\0' ? "; " : "", d.note);
        }
    }
    if (j != NULL)
        json_array_end(j);
}

/* On the simulator, the run on the profile's host (run_predict.c) into @b->predict. */
static void predict(const run_opts_t *ro, ferry_device_t *dev, run_bound_t *b)
{
    ferry_host_props_t host = FERRY_HOST_PROPS_INIT;
    if (ferry_device_is_simulated(dev) && ferry_device_host(dev, &host) == 0)
        run_predict(ro, &host, b->transport_gbps, b->device_bound, &b->predict);
}

/* The kind of a stream in --json ("all": --single-stream, every op on one stream). */
static const char *stream_kind_key(char k)
{
    return k == 'h' ? "h2d" : k == 'c' ? "compute" : k == 'd' ? "d2h" : "all";
}

/* The health counters of the run: the fallback ladder, deadlines, watchdog and link. */
static void json_health(json_t *j, const ferry_pipeline_stats_t *s)
{
    json_key_uint(j, "chunks_cpu", s->chunks_cpu);
    json_key_uint(j, "chunks_moved", s->chunks_moved);
    json_key_uint(j, "worker_restarts", s->worker_restarts);
    json_key_double(j, "worker_recovery_ms", (double)s->worker_recovery_ns / 1e6, 3);
    json_key_uint(j, "failure_records", s->failure_records);
    json_key_bool(j, "gpu_lost", s->gpu_lost);
    json_key_bool(j, "gpu_hung", s->gpu_hung);
    json_key_uint(j, "deadlines_passed", s->deadlines_passed);
    json_key_uint(j, "ladder_steps_down", s->ladder_steps_down);
    json_key_uint(j, "ladder_steps_up", s->ladder_steps_up);
    json_key_uint(j, "ladder_level", s->ladder_level);
    json_key_uint(j, "bw_alerts", s->bw_alerts);
    json_key_double(j, "link_ratio_h2d", s->bw_ratio[0], 4);
    json_key_double(j, "link_ratio_d2h", s->bw_ratio[1], 4);
    json_key_uint(j, "chunks_retried", s->chunks_retried);
    json_key_uint(j, "link_samples", s->link_samples);
    if (s->link_samples > 0) {
        json_key_double(j, "link_gbps_h2d", s->link_bps[0] / 1e9, 3);
        json_key_double(j, "link_gbps_d2h", s->link_bps[1] / 1e9, 3);
        json_key_double(j, "link_own_gbps_h2d", s->link_own_bps[0] / 1e9, 3);
        json_key_double(j, "link_own_gbps_d2h", s->link_own_bps[1] / 1e9, 3);
    }
    json_key_double(j, "deadline_overrun_s", (double)s->deadline_overrun_ns / 1e9, 6);
    json_key_uint(j, "heartbeats_sent", s->heartbeats_sent);
    json_key_uint(j, "heartbeats_seen", s->heartbeats_seen);
    json_key_uint(j, "heartbeat_stalls", s->heartbeat_stalls);
    json_key_uint(j, "completion_stalls", s->completion_stalls);
    json_key_uint(j, "watchdog_stalls", s->watchdog_stalls);
}

/* --verify, its figures and the rates, in --json. */
static void json_verify(json_t *j, const run_opts_t *ro, const run_totals_t *t,
                        const run_bound_t *b, unsigned verifiers, bool ok)
{
    json_key_uint(j, "verified_bytes", t->verified_bytes);
    json_key_bool(j, "verified", ok && ro->verify_mode == RUN_VERIFY_FULL);
    json_key_str(j, "verify", run_verify_name(ro->verify_mode));
    if (ro->verify_mode == RUN_VERIFY_SAMPLE)
        json_key_uint(j, "verify_sample_every", RUN_VERIFY_SAMPLE_EVERY);
    json_key_uint(j, "batches_checked", t->checked);
    json_key_uint(j, "done_bytes", t->done_bytes);
    json_key_uint(j, "verifiers", verifiers);
    json_key_double(j, "verify_busy", b->verify_busy, 4);
    json_key_double(j, "verify_wait", b->verify_wait, 4);
    json_key_double(j, "read_share", b->read_share, 4);
    json_key_double(j, "write_share", b->write_share, 4);
    json_key_double(j, "transport_gbps", b->transport_gbps, 3);
    json_key_double(j, "end_to_end_gbps", b->e2e_gbps, 3);
    json_key_str(j, "bound", b->bound);
    json_key_str(j, "bound_why", b->why);
    json_key(j, "predicted");
    if (!b->predict.have) {
        json_null(j);
        return;
    }
    json_object_begin(j);
    json_key_double(j, "end_to_end_gbps", b->predict.gbps, 3);
    json_key_str(j, "bound", b->predict.bound);
    json_key_str(j, "bound_why", b->predict.why);
    json_key_double(j, "memory_traffic_per_byte", b->predict.traffic, 3);
    json_object_end(j);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The batches' latency, submit to completion: p50 and p99 in microseconds; 0 when none was
 * recorded. */
static void latency_us(const run_state_t *st, double *p50, double *p99)
{
    *p50 = *p99 = 0;
    size_t n = st != NULL ? st->nlat : 0;
    uint64_t *v = n > 0 ? malloc(n * sizeof(*v)) : NULL;
    if (v == NULL)
        return;
    memcpy(v, st->lat_ns, n * sizeof(*v));
    qsort(v, n, sizeof(*v), cmp_u64);
    *p50 = (double)v[n / 2] / 1e3;
    *p99 = (double)v[n - 1 - n / 100] / 1e3;
    free(v);
}

static void print_json(const run_opts_t *ro, ferry_runtime_t *rt, const ferry_device_props_t *p,
                       const run_outcome_t *o, const run_bound_t *b, unsigned long long chunk)
{
    const ferry_pipeline_stats_t *s = o->s;
    const run_totals_t *t = o->t;
    unsigned long long total = o->total, nbatches = o->nbatches;
    double wall_s = o->wall_s;
    bool ok = o->ok;
    double el = (double)s->elapsed_ns / 1e9;
    json_t j;
    json_command_begin(&j, stdout, "run");
    json_key_bool(&j, "ok", ok);
    json_key_str(&j, "backend", ferry_runtime_backend(rt));
    json_key_str(&j, "device", p->name);
    json_key_bool(&j, "simulated", p->simulated);
    json_key_str(&j, "profile", p->profile);
    json_key_str(&j, "workload", ro->workload);
    json_key_uint(&j, "bytes", total);
    json_key_uint(&j, "batches", nbatches);
    json_key_uint(&j, "chunk_bytes", chunk);
    json_key_uint(&j, "chunks", s->chunks);
    json_key_uint(&j, "copy_group", s->copy_group);
    json_key_double(&j, "time_s", el, 9);
    json_key_bool(&j, "time_simulated", p->simulated);
    json_key_double(&j, "wall_s", wall_s, 3);
    json_key_double(&j, "gbps_h2d", s->gbps_h2d, 3);
    json_key_double(&j, "gbps_d2h", s->gbps_d2h, 3);
    double p50, p99;
    latency_us(o->st, &p50, &p99);
    json_key_double(&j, "latency_p50_us", p50, 2);
    json_key_double(&j, "latency_p99_us", p99, 2);
    json_key_double(&j, "link_gbps", p->link_gbps, 3);
    json_key_double(&j, "overlap", s->overlap, 4);
    json_key_double(&j, "util_h2d", el > 0 ? (double)s->busy_h2d_ns / 1e9 / el : 0, 4);
    json_key_double(&j, "util_compute", el > 0 ? (double)s->busy_compute_ns / 1e9 / el : 0, 4);
    json_key_double(&j, "util_d2h", el > 0 ? (double)s->busy_d2h_ns / 1e9 / el : 0, 4);
    json_key(&j, "streams");
    json_array_begin(&j);
    for (unsigned i = 0; i < s->streams; i++) {
        double busy = (double)s->stream_busy_ns[i] / 1e9;
        json_object_begin(&j);
        json_key_uint(&j, "index", i);
        json_key_str(&j, "kind", stream_kind_key(s->stream_kind[i]));
        json_key_double(&j, "busy_s", busy, 9);
        json_key_double(&j, "util", el > 0 ? busy / el : 0, 4);
        json_object_end(&j);
    }
    json_array_end(&j);
    json_key_bool(&j, "host_pinned", s->host_pinned);
    json_key_uint(&j, "pinned_bytes", o->pinned_bytes);
    json_key_double(&j, "pin_s", o->pin_s, 3);
    json_key_uint(&j, "chunks_timed", s->chunks_timed);
    json_health(&j, s);
    json_key_uint(&j, "batches_ok_gpu", t->ok_gpu);
    json_key_uint(&j, "batches_ok_cpu", t->ok_cpu);
    json_key_uint(&j, "batches_failed", t->failed);
    json_key_uint(&j, "batches_mismatched", t->mismatched);
    json_verify(&j, ro, t, b, o->verifiers, ok);
    if (o->pl != NULL)
        print_devices(o->pl, &j);
    json_key_uint(&j, "failure_log_errors", s->failure_log_errors);
    json_key_bool(&j, "interrupted", ro->signal != 0);
    if (ro->signal) {
        json_key_str(&j, "signal", run_signal_name(ro->signal));
        json_key_uint(&j, "bytes_done", t->done_bytes);
    }
    if (ro->trace)
        json_key_str(&j, "trace", ro->trace);
    if (ro->report_done)
        json_key_str(&j, "report", ro->report);
    json_end(&j);
}

/* The summary's lines on a lost GPU path and the failed attempts. */
static void print_faults(const run_opts_t *ro, const ferry_pipeline_stats_t *s)
{
    const char *why = s->gpu_hung ? "a hung kernel (it ignored the abort flag)" : "a sticky error";
    if (s->gpu_lost && s->chunks_moved > 0)
        printf("  faults     %s ended a device's GPU path: %llu of its chunks moved to the "
               "set's other devices, %llu ran on the CPU\n",
               why, (unsigned long long)s->chunks_moved, (unsigned long long)s->chunks_cpu);
    else if (s->gpu_lost)
        printf("  faults     %s ended the GPU path: later chunks ran on the CPU fallback\n", why);
    if (s->worker_restarts > 0)
        printf("  worker     %llu restart(s): a worker process ended and another ran its batches "
               "again; the last back on the device in %.1f ms\n",
               (unsigned long long)s->worker_restarts, (double)s->worker_recovery_ns / 1e6);
    const char *flog = ro->opts ? ferry_options_get_str(ro->opts, "failure_log") : NULL;
    if (s->failure_records > 0 || s->chunks_cpu > 0)
        printf("  failures   %llu failed GPU attempt(s), %llu chunk(s) then done by a GPU retry, "
               "%llu on the CPU; records: %s\n",
               (unsigned long long)s->failure_records, (unsigned long long)s->chunks_retried,
               (unsigned long long)s->chunks_cpu,
               flog && flog[0] ? flog : "none (set --failure-log FILE)");
    if (s->failure_log_errors > 0)
        printf("  failures   %llu record(s) could not be written to %s\n",
               (unsigned long long)s->failure_log_errors, flog ? flog : "the failure log");
}

/* The summary's verify line: what --verify checked and what it found. */
static void print_verify_line(const run_opts_t *ro, const run_totals_t *t)
{
    char b1[32], b2[32];
    if (t->mismatched)
        printf("  verify     FAILED: %llu batch(es) differ from the CPU reference, first at byte "
               "%llu\n",
               (unsigned long long)t->mismatched, (unsigned long long)t->first_bad_offset);
    else if (t->failed)
        printf("  verify     FAILED: %llu batch(es) did not complete\n",
               (unsigned long long)t->failed);
    else if (ro->verify_mode == RUN_VERIFY_OFF)
        printf("  verify     not verified (--verify off): %s done, nothing checked\n",
               cli_bytes(t->done_bytes, b1, sizeof(b1)));
    else if (ro->verify_mode == RUN_VERIFY_SAMPLE)
        printf("  verify     OK, sampled (1 batch in %u and the last): %llu batch(es), %s of %s, "
               "match the CPU reference\n",
               RUN_VERIFY_SAMPLE_EVERY, (unsigned long long)t->checked,
               cli_bytes(t->verified_bytes, b1, sizeof(b1)),
               cli_bytes(t->done_bytes, b2, sizeof(b2)));
    else if (ro->signal)
        printf("  verify     OK: the %s done match the CPU reference\n",
               cli_bytes(t->verified_bytes, b1, sizeof(b1)));
    else
        printf("  verify     OK: all %s match the CPU reference\n",
               cli_bytes(t->verified_bytes, b1, sizeof(b1)));
}

void run_print_summary(const run_opts_t *ro, ferry_runtime_t *rt, ferry_device_t *dev,
                       const run_outcome_t *o, unsigned long long chunk)
{
    const ferry_pipeline_stats_t *s = o->s;
    const run_totals_t *t = o->t;
    unsigned long long total = o->total, nbatches = o->nbatches;
    double wall_s = o->wall_s;
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    ferry_device_props(dev, &p);
    double el = (double)s->elapsed_ns / 1e9;
    double u_h = el > 0 ? (double)s->busy_h2d_ns / 1e9 / el : 0;
    double u_c = el > 0 ? (double)s->busy_compute_ns / 1e9 / el : 0;
    double u_d = el > 0 ? (double)s->busy_d2h_ns / 1e9 / el : 0;
    run_bound_t b;
    find_bound(o, p.simulated, &b);
    predict(ro, dev, &b);
    if (ro->json) {
        print_json(ro, rt, &p, o, &b, chunk);
        return;
    }
    char b1[32], b2[32], b3[32];
    const char *sim = p.simulated ? " (simulated)" : "";
    printf("ferry run: %s, %s in %llu batch(es) of up to %s, chunks of %s", ro->workload,
           cli_bytes(total, b1, sizeof(b1)), nbatches, cli_bytes(ro->batch_bytes, b2, sizeof(b2)),
           cli_bytes(chunk, b3, sizeof(b3)));
    if (s->copy_group > 1)
        printf(", up to %u per copy (coalesce_bytes)", s->copy_group);
    printf("\n");
    printf("  backend    %s, %s%s\n", ferry_runtime_backend(rt), p.name, p.profile[0] ? "" : "");
    if (p.profile[0])
        printf("  profile    %s\n", p.profile);
    printf("  time       %.3f ms%s, wall %.2f s\n", el * 1e3, sim, wall_s);
    printf("  H2D        %.1f GB/s%s\n", s->gbps_h2d, sim);
    printf("  D2H        %.1f GB/s%s", s->gbps_d2h, sim);
    if (p.link_gbps > 0)
        printf("   (link: %.0f GB/s per direction, theoretical)", p.link_gbps);
    printf("\n");
    double p50, p99;
    latency_us(o->st, &p50, &p99);
    if (o->st != NULL && o->st->nlat > 0)
        printf("  latency    p50 %.1f us, p99 %.1f us%s: a batch, submit to completion\n", p50, p99,
               sim);
    print_rates(&b, p.simulated);
    printf("\n  overlap    %.2f  (engine busy time / elapsed: 1 = serial, 3 = all busy)\n",
           s->overlap);
    printf("  engines    H2D %.1f%%, compute %.1f%%, D2H %.1f%%", u_h * 100, u_c * 100, u_d * 100);
    /* Sampled with several copy streams the copy figures are an estimate that reads low
     * (docs/metrics.md, "The bandwidth monitor"): say so where they are shown. */
    if (s->copy_streams > 1 && s->chunks_timed < s->chunks)
        printf("  (copies sampled: low with %u copy streams; --op-timing all is exact)",
               s->copy_streams);
    printf("\n");
    printf("  streams   ");
    for (unsigned i = 0; i < s->streams; i++)
        printf(" %u:%s %.1f%%", i,
               s->stream_kind[i] == 'h'   ? "H2D"
               : s->stream_kind[i] == 'c' ? "compute"
               : s->stream_kind[i] == 'd' ? "D2H"
                                          : "all",
               el > 0 ? (double)s->stream_busy_ns[i] / 1e9 / el * 100 : 0);
    if (o->pinned_bytes > 0) {
        char pb[32];
        if (p.simulated) /* registered with the simulator, which pins nothing */
            printf("\n  host       %s of buffers from ferry_host_alloc (simulated: not pinned)",
                   cli_bytes(o->pinned_bytes, pb, sizeof(pb)));
        else
            printf("\n  host       %s of buffers pinned in %.2f s (ferry_host_alloc)",
                   cli_bytes(o->pinned_bytes, pb, sizeof(pb)), o->pin_s);
    }
    if (!s->host_pinned)
        printf("\n  host       pageable: pinning was refused, copies ran at pageable rates");
    printf("\n  batches    %llu ok on GPU, %llu ok on CPU, %llu failed\n",
           (unsigned long long)t->ok_gpu, (unsigned long long)t->ok_cpu,
           (unsigned long long)t->failed);
    if (o->pl != NULL)
        print_devices(o->pl, NULL);
    if (s->bw_alerts > 0)
        printf("  bandwidth  %llu alert(s): copies ran below the alert share of the link (the "
               "log names the likely cause); last window H2D %.0f%%, D2H %.0f%% of the link\n",
               (unsigned long long)s->bw_alerts, s->bw_ratio[0] * 100, s->bw_ratio[1] * 100);
    /* The latest sample, when it saw traffic (one taken before or after the run sees none). */
    if (s->link_samples > 0 && s->link_bps[0] + s->link_bps[1] > 0)
        printf("  link       last of %llu sample(s): %.1f GB/s H2D, %.1f GB/s D2H on the link, "
               "of which this run at most %.1f and %.1f\n",
               (unsigned long long)s->link_samples, s->link_bps[0] / 1e9, s->link_bps[1] / 1e9,
               s->link_own_bps[0] / 1e9, s->link_own_bps[1] / 1e9);
    if (s->ladder_steps_down > 0)
        printf("  ladder     %llu step(s) down (fewer streams, fewer chunks in flight), %llu back "
               "up; level %u at the end\n",
               (unsigned long long)s->ladder_steps_down, (unsigned long long)s->ladder_steps_up,
               s->ladder_level);
    if (s->deadlines_passed > 0)
        printf("  deadlines  %llu chunk(s) passed their deadline; the abort flag was raised%s\n",
               (unsigned long long)s->deadlines_passed,
               s->deadline_overrun_ns > 0 ? "; aborted chunks were redone" : "");
    if (s->heartbeat_stalls + s->completion_stalls + s->watchdog_stalls > 0)
        printf("  watchdog   stalls: the GPU ran no heartbeat %llu time(s), the completion thread "
               "stopped polling %llu, the watchdog stopped %llu (the log says when)\n",
               (unsigned long long)s->heartbeat_stalls, (unsigned long long)s->completion_stalls,
               (unsigned long long)s->watchdog_stalls);
    print_faults(ro, s);
    if (ro->signal)
        printf("  stopped    by %s after %s of %s %s; %s\n", run_signal_name(ro->signal),
               cli_bytes(t->done_bytes, b1, sizeof(b1)), cli_bytes(total, b2, sizeof(b2)),
               ro->verify_mode == RUN_VERIFY_FULL ? "verified" : "done",
               !ro->output         ? "nothing more was submitted"
               : ro->output_stream ? "the output stream ends there"
                                   : "--output was not written");
    print_verify_line(ro, t);
    if (ro->trace)
        printf("  trace      %s (open in ui.perfetto.dev)\n", ro->trace);
    if (ro->report_done)
        printf("  report     %s\n", ro->report);
}

/* ---- --report ------------------------------------------------------------------------------ */

/* The report's timeline shows the first REPORT_CHUNKS chunks (the first trace_chunks when that
 * option is set, at most REPORT_MAX_CHUNKS), drawn from the trace's op records. Without --trace
 * only those chunks are recorded and timed; the rest of the run is sampled as usual. */
#define REPORT_CHUNKS     64
#define REPORT_MAX_CHUNKS 4096

void run_report_trace_setup(run_opts_t *ro, ferry_options_t *opts)
{
    int64_t tc = 0, tr = 0;
    ferry_options_get_i64(opts, "trace_chunks", &tc);
    ferry_options_get_i64(opts, "trace", &tr);
    if (tc == 0 && tr == 0) {
        char v[16];
        snprintf(v, sizeof(v), "%d", REPORT_CHUNKS);
        ferry_options_set(opts, "trace_chunks", v);
    }
    ro->tl_chunks = tc <= 0 ? REPORT_CHUNKS : tc > REPORT_MAX_CHUNKS ? REPORT_MAX_CHUNKS : tc;
    ferry_options_set(opts, "trace", "1");
}

typedef struct op_list {
    ferry_op_record_t *v;
    size_t n, cap, max;
    int device; /* keep this device's ops only; -1: every device's */
} op_list_t;

/* ferry_pipeline_ops callback: keep the first @max ops (the earliest: ops come in the order
 * their chunks retired). */
static void keep_op(const ferry_op_record_t *op, void *arg)
{
    op_list_t *l = arg;
    if (l->n == l->max || (l->device >= 0 && op->device != (unsigned)l->device))
        return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        ferry_op_record_t *v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL) {
            l->max = l->n;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *op;
}

/* The timeline's window: until the @chunks-th chunk's D2H ended, or sooner where the records
 * of a kind of op stop when fewer than the run's @run_chunks were recorded (a trace of the
 * first N chunks: the H2D engine goes on with chunk N+1, unrecorded, while the last recorded
 * D2Hs run), so that no row looks idle for want of records. *done: the chunks whose D2H ended
 * in the window. 0 when no chunk was recorded. */
static uint64_t window_end(const op_list_t *l, unsigned long long chunks, uint64_t run_chunks,
                           size_t *done)
{
    uint64_t *ends = malloc((l->n + 1) * sizeof(*ends)), w = 0, last[3] = {0, 0, 0};
    size_t k = 0;
    for (size_t i = 0; ends != NULL && i < l->n; i++) {
        const ferry_op_record_t *op = &l->v[i];
        if (op->kind == FERRY_OP_D2H)
            ends[k++] = op->end_ns;
        if ((unsigned)op->kind < 3 && op->end_ns > last[op->kind])
            last[op->kind] = op->end_ns;
    }
    *done = 0;
    if (k > 0) {
        qsort(ends, k, sizeof(*ends), cmp_u64);
        w = ends[(k < chunks ? k : (size_t)chunks) - 1];
        for (int kind = 0; kind < 3 && k < run_chunks; kind++)
            w = last[kind] < w ? last[kind] : w;
        while (*done < k && ends[*done] <= w)
            ++*done;
    }
    free(ends);
    return w;
}

static const char *stream_kind_name(char k)
{
    return k == 'h' ? "H2D" : k == 'c' ? "compute" : k == 'd' ? "D2H" : "all";
}

static int kind_color(char k)
{
    return k == 'h' ? 0 : k == 'c' ? 2 : k == 'd' ? 1 : 6;
}

/* The position of @pl's first GPU among its devices (0 for a pipeline of one device, or a set
 * of the CPU alone). */
static int first_gpu(ferry_pipeline_t *pl)
{
    unsigned n = ferry_pipeline_devices(pl);
    for (unsigned i = 0; n > 1 && i < n; i++) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        if (ferry_pipeline_device_stats(pl, i, &d) == 0 && d.index != FERRY_DEVICE_CPU)
            return (int)i;
    }
    return 0;
}

static void timeline_section(report_t *r, const run_opts_t *ro, ferry_pipeline_t *pl,
                             const ferry_pipeline_stats_t *s, bool simulated)
{
    /* the window's chunks, and those in flight with them (depth is at most 64); of a set, its
     * first GPU's (whose streams the set's stats name) */
    op_list_t l = {.max = 3 * ((size_t)ro->tl_chunks + 64), .device = first_gpu(pl)};
    report_heading(r, "Timeline");
    if (ferry_pipeline_devices(pl) > 1)
        report_text(r, "Of the set's devices, the first GPU's: device %d below.", l.device);
    size_t shown = 0;
    uint64_t w = 0;
    if (ferry_pipeline_ops(pl, keep_op, &l) == 0)
        w = window_end(&l, ro->tl_chunks, s->chunks, &shown);
    if (w == 0 || s->streams == 0) {
        report_text(r, "No op was recorded: the run moved no chunk through the GPU.");
        free(l.v);
        return;
    }
    char names[FERRY_STATS_MAX_STREAMS][40], title[160];
    const char *rows[FERRY_STATS_MAX_STREAMS];
    for (unsigned i = 0; i < s->streams; i++) {
        snprintf(names[i], sizeof(names[i]), "stream %u (%s)", i,
                 stream_kind_name(s->stream_kind[i]));
        rows[i] = names[i];
    }
    snprintf(title, sizeof(title), "The first %.3f ms of the run's %.3f ms: %zu chunk(s) done",
             (double)w / 1e6, (double)s->elapsed_ns / 1e6, shown);
    report_text(r,
                "One row per stream, a rectangle per op (hover over it for its batch, chunk, "
                "bytes and times), from the trace's op records (device events%s). %s",
                simulated ? ": virtual time on the simulator" : "",
                ro->trace ? "With --trace every chunk is recorded; the chart shows the first ones."
                          : "Without --trace only the first chunks are recorded and timed (the "
                            "chart ends where a stream's records do); the rest of the run is "
                            "sampled (one chunk in 31) as usual.");
    report_timeline_t t = {.chart = "timeline",
                           .title = title,
                           .row_names = rows,
                           .rows = s->streams,
                           .ops = l.v,
                           .nops = l.n,
                           .window_ns = w};
    report_timeline_chart(r, &t);
    free(l.v);
}
static void utilisation_section(report_t *r, const ferry_pipeline_stats_t *s)
{
    double el = (double)s->elapsed_ns;
    report_bar_t bars[3 + FERRY_STATS_MAX_STREAMS];
    char names[FERRY_STATS_MAX_STREAMS][40], note[320];
    bars[0] = (report_bar_t){"H2D engine", el > 0 ? (double)s->busy_h2d_ns / el : 0, 0};
    bars[1] =
        (report_bar_t){"compute, all streams", el > 0 ? (double)s->busy_compute_ns / el : 0, 2};
    bars[2] = (report_bar_t){"D2H engine", el > 0 ? (double)s->busy_d2h_ns / el : 0, 1};
    int n = 3;
    for (unsigned i = 0; i < s->streams; i++, n++) {
        snprintf(names[i], sizeof(names[i]), "stream %u (%s)", i,
                 stream_kind_name(s->stream_kind[i]));
        bars[n] = (report_bar_t){names[i], el > 0 ? (double)s->stream_busy_ns[i] / el : 0,
                                 kind_color(s->stream_kind[i])};
    }
    snprintf(note, sizeof(note),
             "Busy time over the elapsed %.3f ms, from the pipeline's stats: %llu of %llu "
             "chunks timed, the rest scaled from them. Compute adds up its streams, so it "
             "passes 100%% when kernels run side by side.",
             el / 1e6, (unsigned long long)s->chunks_timed, (unsigned long long)s->chunks);
    report_heading(r, "Engine utilisation");
    report_bars_chart(r, "engine-utilisation", "Busy fraction per engine and stream",
                      "busy (% of the elapsed time)", bars, n, note);
}

static void summary_section(report_t *r, const run_opts_t *ro, ferry_device_t *dev,
                            const run_outcome_t *o)
{
    const ferry_pipeline_stats_t *s = o->s;
    const run_totals_t *t = o->t;
    ferry_device_props_t p = FERRY_DEVICE_PROPS_INIT;
    ferry_device_props(dev, &p);
    char b1[32], b2[32], b3[32], link[256];
    const char *sim = p.simulated ? " (simulated)" : "";
    report_heading(r, "Summary");
    report_table(r, NULL, NULL);
    if (strcmp(ro->workload, "fma") == 0)
        report_kv(r, "workload", "fma, %llu multiply-adds per float",
                  ro->intensity ? ro->intensity : 64);
    else
        report_kv(r, "workload", "%s", ro->workload);
    report_kv(r, "bytes",
              "%s in %llu batch(es) of up to %s; %llu chunk(s) of %s, up to %u per copy",
              cli_bytes(o->total, b1, sizeof(b1)), o->nbatches,
              cli_bytes(ro->batch_bytes, b2, sizeof(b2)), (unsigned long long)s->chunks,
              cli_bytes(s->chunk_bytes, b3, sizeof(b3)), s->copy_group ? s->copy_group : 1);
    report_kv(r, "time", "%.3f ms%s, wall %.2f s", (double)s->elapsed_ns / 1e6, sim, o->wall_s);
    report_kv(r, "H2D", "%.2f GB/s%s", s->gbps_h2d, sim);
    report_kv(r, "D2H", "%.2f GB/s%s", s->gbps_d2h, sim);
    report_link_text(&p, link, sizeof(link));
    report_kv(r, "link", "%s", link[0] ? link : "unknown");
    report_kv(r, "overlap", "%.2f (engine busy time / elapsed: 1 serial, 3 all busy)", s->overlap);
    if (s->streams == 1)
        report_kv(r, "plan", "depth %u, every op on one stream (--single-stream), queue %u",
                  s->depth, s->queue_depth);
    else
        report_kv(r, "plan",
                  "depth %u, %u copy stream(s) per direction, %u compute stream(s), queue %u",
                  s->depth, s->copy_streams, s->compute_streams, s->queue_depth);
    report_kv(r, "host memory", "%s", s->host_pinned ? "pinned" : "pageable: pinning was refused");
    report_kv(r, "batches", "%llu on the GPU, %llu on the CPU, %llu failed",
              (unsigned long long)t->ok_gpu, (unsigned long long)t->ok_cpu,
              (unsigned long long)t->failed);
    report_kv(r, "failures",
              "%llu failed GPU attempt(s), %llu chunk(s) on the CPU fallback, %llu deadline(s) "
              "passed, GPU path %s",
              (unsigned long long)s->failure_records, (unsigned long long)s->chunks_cpu,
              (unsigned long long)s->deadlines_passed, s->gpu_lost ? "lost" : "kept");
    report_kv(r, "ladder", "%llu step(s) down, %llu up, level %u at the end",
              (unsigned long long)s->ladder_steps_down, (unsigned long long)s->ladder_steps_up,
              s->ladder_level);
    report_kv(r, "bandwidth alerts", "%llu", (unsigned long long)s->bw_alerts);
    run_bound_t b;
    find_bound(o, p.simulated, &b);
    predict(ro, dev, &b);
    report_kv(r, "rates", "transport %.2f GB/s%s, end to end %.2f GB/s (wall)", b.transport_gbps,
              sim, b.e2e_gbps);
    report_kv(r, "bound", "%s: %s", b.bound, b.why);
    if (b.predict.have)
        report_kv(r, "predicted", "%.1f GB/s end to end on the profile's host, bound by %s: %s",
                  b.predict.gbps, b.predict.bound, b.predict.why);
    if (t->mismatched)
        report_kv(r, "verify", "FAILED: %llu batch(es) differ, first at byte %llu",
                  (unsigned long long)t->mismatched, (unsigned long long)t->first_bad_offset);
    else if (ro->verify_mode == RUN_VERIFY_OFF)
        report_kv(r, "verify", "not verified (--verify off): %s done",
                  cli_bytes(t->done_bytes, b1, sizeof(b1)));
    else if (ro->verify_mode == RUN_VERIFY_SAMPLE)
        report_kv(r, "verify", "%s, sampled (1 batch in %u and the last): %s of %s checked",
                  o->ok ? "OK" : "FAILED", RUN_VERIFY_SAMPLE_EVERY,
                  cli_bytes(t->verified_bytes, b1, sizeof(b1)),
                  cli_bytes(o->total, b2, sizeof(b2)));
    else
        report_kv(r, "verify", "%s: %s of %s match the CPU reference", o->ok ? "OK" : "FAILED",
                  cli_bytes(t->verified_bytes, b1, sizeof(b1)),
                  cli_bytes(o->total, b2, sizeof(b2)));
    report_table_end(r);
}

#define SHARE_BINS 40

/* A set's devices over time: each device's share of the bytes finished in each of SHARE_BINS
 * intervals of the recorded ops (a GPU's D2H copies, the CPU's parts), on each device's own
 * clock from its first chunk. A pipeline of one device: nothing. */
static void devices_section(report_t *r, const run_opts_t *ro, ferry_pipeline_t *pl)
{
    unsigned n = ferry_pipeline_devices(pl);
    if (n < 2 || n > FERRY_MAX_DEVICE_SET)
        return;
    report_heading(r, "Devices over time");
    op_list_t l = {.max = SIZE_MAX, .device = -1};
    uint64_t end = 0, last[FERRY_MAX_DEVICE_SET] = {0};
    if (ferry_pipeline_ops(pl, keep_op, &l) == 0)
        for (size_t i = 0; i < l.n; i++)
            if (l.v[i].device < n && l.v[i].end_ns > last[l.v[i].device])
                last[l.v[i].device] = l.v[i].end_ns;
    /* with every chunk recorded (--trace), the whole run; else until the first device's
     * records stop, so that no device looks idle for want of records */
    for (unsigned i = 0; i < n; i++)
        if (last[i] > 0 && (end == 0 || (ro->trace ? last[i] > end : last[i] < end)))
            end = last[i];
    double *x = calloc(SHARE_BINS, sizeof(double)),
           *y = calloc((size_t)n * SHARE_BINS, sizeof(double));
    double *all = calloc(SHARE_BINS, sizeof(double));
    report_series_t *se = calloc(n, sizeof(*se));
    char(*names)[512] = calloc(n, sizeof(*names));
    if (end == 0 || x == NULL || y == NULL || all == NULL || se == NULL || names == NULL) {
        report_text(r, "No op was recorded: nothing to show.");
        goto out;
    }
    for (size_t i = 0; i < l.n; i++) {
        const ferry_op_record_t *op = &l.v[i];
        if (op->device >= n)
            continue;
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        bool cpu =
            ferry_pipeline_device_stats(pl, op->device, &d) == 0 && d.index == FERRY_DEVICE_CPU;
        if (op->kind != (cpu ? FERRY_OP_COMPUTE : FERRY_OP_D2H))
            continue;
        if (op->end_ns > end)
            continue;
        size_t b = (size_t)((double)op->end_ns / (double)end * SHARE_BINS);
        b = b >= SHARE_BINS ? SHARE_BINS - 1 : b;
        y[(size_t)op->device * SHARE_BINS + b] += (double)op->bytes;
        all[b] += (double)op->bytes;
    }
    double w = (double)end / 1e6 / SHARE_BINS; /* ms a bin */
    for (unsigned b = 0; b < SHARE_BINS; b++)
        x[b] = (b + 0.5) * w;
    for (unsigned i = 0; i < n; i++) {
        ferry_pipeline_device_stats_t d = FERRY_PIPELINE_DEVICE_STATS_INIT;
        ferry_pipeline_device_stats(pl, i, &d);
        for (unsigned b = 0; b < SHARE_BINS; b++)
            y[i * SHARE_BINS + b] = all[b] > 0 ? 100 * y[i * SHARE_BINS + b] / all[b] : NAN;
        if (d.index == FERRY_DEVICE_CPU)
            snprintf(names[i], sizeof(names[i]), "cpu: %.1f%% of the bytes%s%s", d.share * 100,
                     d.note[0] ? "; " : "", d.note);
        else
            snprintf(names[i], sizeof(names[i]), "device %d %s: %.1f%% of the bytes%s%s", d.index,
                     d.name, d.share * 100, d.left ? "; left: " : "", d.why);
        se[i] = (report_series_t){.name = names[i],
                                  .x = x,
                                  .y = y + (size_t)i * SHARE_BINS,
                                  .n = SHARE_BINS,
                                  .color = (int)(i % 8)};
    }
    report_text(
        r,
        "Each device's share of the bytes finished in each of %d intervals of %.3f ms: a "
        "GPU's by its device-to-host copies, the CPU's by its parts, from the recorded ops, "
        "each device on its own clock from its first chunk. Without --trace only each "
        "device's first chunks are recorded, and the chart ends where the first device's records "
        "do.",
        SHARE_BINS, w);
    report_xy_t c = {.chart = "devices",
                     .title = "Share of the bytes finished, per device",
                     .x_label = "time (ms)",
                     .y_label = "share (%)",
                     .y_unit = "%",
                     .x_unit = "ms",
                     .series = se,
                     .nseries = (int)n};
    report_xy_chart(r, &c);
out:
    free(names);
    free(se);
    free(all);
    free(y);
    free(x);
    free(l.v);
}

int run_write_report(const run_opts_t *ro, ferry_runtime_t *rt, ferry_device_t *dev,
                     ferry_pipeline_t *pl, const run_outcome_t *o)
{
    report_t *r = report_open("run", ro->report, "ferry run", ro->argc, ro->argv, rt, dev);
    if (r == NULL)
        return CLI_FAIL;
    summary_section(r, ro, dev, o);
    timeline_section(r, ro, pl, o->s, ferry_device_is_simulated(dev));
    devices_section(r, ro, pl);
    utilisation_section(r, o->s);
    return report_close(r);
}
