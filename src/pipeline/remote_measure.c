/* ferry_pipeline_connections_measure (ferry/connections.h): the queues a pipeline's device
 * really has where the pipeline drives it. In one process that is this process's context;
 * under isolation=process it is the worker's, whose CUDA_DEVICE_MAX_CONNECTIONS is its own
 * (option connections_per_device), so the worker runs the pattern and sends the figures. */
#include <string.h>

#include "base/base.h"
#include "pipeline/pipeline_internal.h"
#include "pipeline/remote_internal.h"

/* Ask the worker; wait for its answer (the reader's), or for its end. */
static int remote_measure(struct ferry__remote *r, unsigned streams, uint64_t a_ns, uint64_t b_ns,
                          unsigned reps, ferry_conn_measure_t *out)
{
    const char *fn = "ferry_pipeline_connections_measure";
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    if (r->shut)
        rc = ferry__error(FERRY_ECLOSED, "%s: the pipeline is closed", fn);
    else if (r->nfl > 0 || r->entering > 0 || r->measuring)
        rc = ferry__error(FERRY_EBUSY,
                          "%s: %u batch(es) in flight%s: drain first (the pattern needs the "
                          "device to itself)",
                          fn, r->nfl, r->measuring ? " or a measurement running" : "");
    else if (r->retired || r->reader_done)
        rc =
            ferry__error(FERRY_ESTICKY, "%s: device %d has no worker (retired)", fn, r->dev->index);
    if (rc == 0) {
        r->measuring = true;
        r->measured = false;
    }
    pthread_mutex_unlock(&r->mu);
    if (rc != 0)
        return rc;
    ferry__wk_msg_t m = {.kind = FERRY__WK_MEASURE,
                         .status = (int32_t)reps,
                         .chunks = streams,
                         .submit_ns = a_ns,
                         .done_ns = b_ns};
    pthread_mutex_lock(&r->wmu);
    int sent = ferry__rm_send(r->ch, &m, -1);
    pthread_mutex_unlock(&r->wmu);
    pthread_mutex_lock(&r->mu);
    while (sent == 0 && !r->measured && !r->reader_done)
        pthread_cond_wait(&r->cv, &r->mu);
    if (sent != 0 || !r->measured)
        rc = ferry__error(FERRY_EBACKEND, "%s: the worker of device %d did not answer", fn,
                          r->dev->index);
    else if (r->meas_status != 0)
        rc = ferry__error(r->meas_status, "%s: in the worker of device %d: %s", fn, r->dev->index,
                          r->meas_text);
    else
        *out = r->meas;
    r->measuring = false;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int ferry_pipeline_connections_measure(ferry_pipeline_t *p, unsigned streams, uint64_t a_ns,
                                       uint64_t b_ns, unsigned reps, ferry_conn_measure_t *out)
{
    const char *fn = "ferry_pipeline_connections_measure";
    if (p == NULL || out == NULL || out->size < sizeof(*out))
        return ferry__error(FERRY_EINVAL,
                            "%s: NULL argument, or out not set up with "
                            "FERRY_CONN_MEASURE_INIT",
                            fn);
    if (p->set != NULL)
        return ferry__error(FERRY_EINVAL,
                            "%s: pipeline '%s' #%u drives a set of devices: measure each device "
                            "(ferry_connections_measure) or a pipeline of one",
                            fn, p->stage_name, p->serial);
    if (on_own_thread(p))
        return ferry__error(FERRY_EBUSY, "%s: called from a callback of pipeline '%s' #%u", fn,
                            p->stage_name, p->serial);
    if (p->remote != NULL)
        return remote_measure(p->remote, streams, a_ns, b_ns, reps, out);
    return ferry_connections_measure(p->dev, streams, a_ns, b_ns, reps, out);
}
