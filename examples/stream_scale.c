/* A complete ferry program: stream 256 MiB through a stage of your own (here: multiply floats
 * by 2 on the CPU; give .gpu a CUDA launcher to run it on a GPU), check the result, and print
 * what the pipeline measured. Build: cc stream_scale.c $(pkg-config --cflags --libs ferry). */
#include <stdio.h>
#include <string.h>

#include <ferry.h>

static int twice_cpu(const ferry_kernel_args_t *a, void *user)
{
    (void)user;
    const float *in = a->in;
    float *out = a->out;
    for (size_t i = 0; i < a->bytes / sizeof(float); i++)
        out[i] = in[i] * 2.0f;
    return 0;
}

static void done(const ferry_batch_result_t *r, void *arg)
{
    if (r->status != 0)
        fprintf(stderr, "batch %llu failed: %s\n", (unsigned long long)r->id,
                ferry_strerror(r->status));
    else
        ++*(int *)arg;
}

int main(void)
{
    const size_t n = (256u << 20) / sizeof(float), batch = 1u << 22;
    float *in = NULL, *out = NULL;
    ferry_runtime_t *rt = NULL;
    ferry_device_t *dev = NULL;
    ferry_pipeline_t *p = NULL;
    int ok = 0, rc = 1;

    ferry_runtime_config_t rcfg = FERRY_RUNTIME_CONFIG_INIT;
    rcfg.backend = "sim"; /* "auto" takes the GPU when there is one */
    if (ferry_runtime_create(&rcfg, &rt) != 0 || ferry_device_get(rt, 0, &dev) != 0) {
        fprintf(stderr, "ferry: %s\n", ferry_last_error());
        goto out;
    }
    /* Pinned buffers: the copies go straight from and to them (malloc'd memory works too, but
     * is staged through the pipeline's own pinned slots). */
    if (ferry_host_alloc(dev, n * sizeof(float), (void **)&in) != 0 ||
        ferry_host_alloc(dev, n * sizeof(float), (void **)&out) != 0) {
        fprintf(stderr, "ferry: %s\n", ferry_last_error());
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        in[i] = (float)(i % 1000);
    ferry_stage_t stage = FERRY_STAGE_INIT;
    stage.name = "twice";
    stage.cpu = twice_cpu;
    stage.granularity = sizeof(float);
    ferry_pipeline_config_t cfg = FERRY_PIPELINE_CONFIG_INIT;
    cfg.device = dev;
    cfg.stage = &stage;
    if (ferry_pipeline_create(&cfg, &p) != 0) {
        fprintf(stderr, "ferry: %s\n", ferry_last_error());
        goto out;
    }
    int batches = 0;
    for (size_t i = 0; i < n; i += batch, batches++) {
        ferry_batch_t b = FERRY_BATCH_INIT;
        b.in = in + i;
        b.out = out + i;
        b.bytes = (n - i < batch ? n - i : batch) * sizeof(float);
        if (ferry_pipeline_submit(p, &b, done, &ok, NULL) != 0) {
            fprintf(stderr, "ferry: %s\n", ferry_last_error());
            goto out;
        }
    }
    ferry_pipeline_drain(p);
    for (size_t i = 0; i < n; i++)
        if (out[i] != in[i] * 2.0f) {
            fprintf(stderr, "wrong result at %zu\n", i);
            goto out;
        }
    ferry_pipeline_stats_t st = FERRY_PIPELINE_STATS_INIT;
    ferry_pipeline_stats(p, &st);
    printf("%d/%d batches ok; H2D %.1f GB/s, D2H %.1f GB/s, overlap %.2f (%s time)\n", ok, batches,
           st.gbps_h2d, st.gbps_d2h, st.overlap,
           ferry_device_is_simulated(dev) ? "simulated" : "measured");
    rc = ok == batches ? 0 : 1;
out:
    ferry_pipeline_destroy(p); /* waits for what is in flight, closes, frees */
    ferry_host_free(dev, in);
    ferry_host_free(dev, out);
    ferry_runtime_destroy(rt);
    return rc;
}
