/* A small streaming JSON writer for the CLI's --json output: objects and arrays nest, the
 * writer puts the commas and tracks the nesting; strings are escaped, doubles are written with
 * the precision the caller gives (the documented outputs fix theirs). Every --json object
 * starts with json_command_begin(). */
#ifndef FERRY_CLI_JSON_H
#define FERRY_CLI_JSON_H

#include <stdbool.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

/* The CLI's deepest output nests 4 levels; a deeper one is a bug, and its extra levels are
 * written without their commas. */
typedef struct json {
    FILE *f;
    int depth;                       /* open objects and arrays */
    bool has_member[JSON_MAX_DEPTH]; /* the container at each depth holds a value already */
    char closer[JSON_MAX_DEPTH];     /* '}' or ']' */
    bool after_key;                  /* a key was written: its value takes no comma */
} json_t;

/* Start writing to @f (nothing written yet). */
void json_init(json_t *j, FILE *f);
/* Start @f's object of a command: {"command":@command,"ferry_version":"0.1.0",
 * "time_utc":"2026-12-04T11:40:00Z" (when it was printed); the caller adds its members and
 * closes with json_end(). */
void json_command_begin(json_t *j, FILE *f, const char *command);
/* Close every open object and array, then write a newline. */
void json_end(json_t *j);

void json_object_begin(json_t *j);
void json_object_end(json_t *j);
void json_array_begin(json_t *j);
void json_array_end(json_t *j);
/* A member's key; the next call writes its value. */
void json_key(json_t *j, const char *key);

/* Values. json_str(NULL) writes "", json_str_or_null(NULL) writes null. */
void json_str(json_t *j, const char *s);
void json_str_or_null(json_t *j, const char *s);
void json_int(json_t *j, long long v);
void json_uint(json_t *j, unsigned long long v);
/* @v with @precision digits after the point ("%.*f"); not finite: null. */
void json_double(json_t *j, double v, int precision);
void json_bool(json_t *j, bool v);
void json_null(json_t *j);
/* Text that is JSON already (a child process's object). */
void json_raw(json_t *j, const char *text);

/* A key and its value in one call. */
void json_key_str(json_t *j, const char *key, const char *s);
void json_key_int(json_t *j, const char *key, long long v);
void json_key_uint(json_t *j, const char *key, unsigned long long v);
void json_key_double(json_t *j, const char *key, double v, int precision);
void json_key_bool(json_t *j, const char *key, bool v);

#endif
