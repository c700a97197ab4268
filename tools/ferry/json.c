/* The CLI's JSON writer (json.h): commas and nesting are kept here so that no command builds
 * JSON with printf. */
#include "json.h"

#include <math.h>
#include <time.h>

#include "ferry.h"

void json_init(json_t *j, FILE *f)
{
    j->f = f;
    j->depth = 0;
    j->after_key = false;
    j->has_member[0] = false;
}

/* Before any value or key: the comma that separates it from the one before. */
static void separate(json_t *j)
{
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    if (j->depth == 0 || j->depth > JSON_MAX_DEPTH)
        return;
    if (j->has_member[j->depth - 1])
        fputc(',', j->f);
    j->has_member[j->depth - 1] = true;
}

static void open_container(json_t *j, char open, char close)
{
    separate(j);
    fputc(open, j->f);
    if (j->depth < JSON_MAX_DEPTH) {
        j->has_member[j->depth] = false;
        j->closer[j->depth] = close;
    }
    j->depth++;
}

static void close_container(json_t *j)
{
    if (j->depth == 0)
        return;
    j->depth--;
    fputc(j->depth < JSON_MAX_DEPTH ? j->closer[j->depth] : '}', j->f);
}

void json_object_begin(json_t *j)
{
    open_container(j, '{', '}');
}

void json_object_end(json_t *j)
{
    close_container(j);
}

void json_array_begin(json_t *j)
{
    open_container(j, '[', ']');
}

void json_array_end(json_t *j)
{
    close_container(j);
}

static void write_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

void json_key(json_t *j, const char *key)
{
    separate(j);
    write_string(j->f, key);
    fputc(':', j->f);
    j->after_key = true;
}

void json_str(json_t *j, const char *s)
{
    separate(j);
    write_string(j->f, s);
}

void json_str_or_null(json_t *j, const char *s)
{
    if (s == NULL)
        json_null(j);
    else
        json_str(j, s);
}

void json_int(json_t *j, long long v)
{
    separate(j);
    fprintf(j->f, "%lld", v);
}

void json_uint(json_t *j, unsigned long long v)
{
    separate(j);
    fprintf(j->f, "%llu", v);
}

void json_double(json_t *j, double v, int precision)
{
    separate(j);
    if (isfinite(v))
        fprintf(j->f, "%.*f", precision, v);
    else
        fputs("null", j->f); /* JSON has no NaN or infinity */
}

void json_bool(json_t *j, bool v)
{
    separate(j);
    fputs(v ? "true" : "false", j->f);
}

void json_null(json_t *j)
{
    separate(j);
    fputs("null", j->f);
}

void json_raw(json_t *j, const char *text)
{
    separate(j);
    fputs(text, j->f);
}

void json_key_str(json_t *j, const char *key, const char *s)
{
    json_key(j, key);
    json_str(j, s);
}

void json_key_int(json_t *j, const char *key, long long v)
{
    json_key(j, key);
    json_int(j, v);
}

void json_key_uint(json_t *j, const char *key, unsigned long long v)
{
    json_key(j, key);
    json_uint(j, v);
}

void json_key_double(json_t *j, const char *key, double v, int precision)
{
    json_key(j, key);
    json_double(j, v, precision);
}

void json_key_bool(json_t *j, const char *key, bool v)
{
    json_key(j, key);
    json_bool(j, v);
}

void json_command_begin(json_t *j, FILE *f, const char *command)
{
    char when[32] = "";
    struct timespec ts;
    struct tm tm;
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0 && gmtime_r(&ts.tv_sec, &tm) != NULL)
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_init(j, f);
    json_object_begin(j);
    json_key_str(j, "command", command);
    json_key_str(j, "ferry_version", ferry_version_string());
    json_key_str(j, "time_utc", when);
}

void json_end(json_t *j)
{
    while (j->depth > 0)
        close_container(j);
    fputc('\n', j->f);
}
