/* ferry version macros, the visibility macro used on every public symbol and the initialiser
 * of the size-stamped structs. */
#ifndef FERRY_VERSION_H
#define FERRY_VERSION_H

#define FERRY_VERSION_MAJOR  0
#define FERRY_VERSION_MINOR  1
#define FERRY_VERSION_PATCH  0
#define FERRY_VERSION_STRING "0.1.0"
/* Monotonic number for compile-time checks: major * 10000 + minor * 100 + patch. */
#define FERRY_VERSION_NUMBER                                                                       \
    (FERRY_VERSION_MAJOR * 10000 + FERRY_VERSION_MINOR * 100 + FERRY_VERSION_PATCH)

#if defined(FERRY_STATIC)
#define FERRY_EXTERN
#elif defined(__GNUC__)
#define FERRY_EXTERN __attribute__((visibility("default")))
#else
#define FERRY_EXTERN
#endif

/* The initialiser of a size-stamped struct @type: size set, every other field zero. The
 * FERRY_*_INIT macros of the public structs are this. */
#define FERRY_SIZED_INIT(type)                                                                     \
    {                                                                                              \
        .size = sizeof(type)                                                                       \
    }

#ifdef __cplusplus
extern "C" {
#endif

/** The library's version as FERRY_VERSION_NUMBER computed when it was built. */
FERRY_EXTERN unsigned ferry_version(void);
/** The library's version string ("0.1.0"); static storage. */
FERRY_EXTERN const char *ferry_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
