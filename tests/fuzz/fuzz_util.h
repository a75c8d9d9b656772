/* fuzz_util.h - helpers shared by the libFuzzer targets in tests/fuzz/.
 *
 * FUZZ_CHECK(cond, ...) is an invariant: when it fails it prints the message and aborts, which
 * libFuzzer reports as a crash and saves the input as a reproducer. Inputs are copied into
 * exactly-sized heap buffers so that AddressSanitizer sees any read past their end.
 */
#ifndef PGPACE_FUZZ_UTIL_H
#define PGPACE_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "\nFUZZ INVARIANT FAILED at %s:%d: %s\n  ", __FILE__, __LINE__,        \
                    #cond);                                                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A NUL-terminated heap copy of data[0..size) (embedded NULs stay; C functions stop at the
 * first one). Exactly size + 1 bytes, so ASan catches reads past the terminator. */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Takes up to n bytes off the front of (*data, *size) into a little-endian integer; missing
 * bytes count as 0, so short inputs still run. */
static inline uint64_t fuzz_take_u64(const uint8_t **data, size_t *size, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = 0;
        if (*size > 0) {
            b = **data;
            (*data)++;
            (*size)--;
        }
        v |= b << (8 * i);
    }
    return v;
}

/* Printable form of a string for invariant messages (escapes, cut at 200 bytes). */
static inline const char *fuzz_show(const char *s)
{
    static char buf[1024];
    size_t o = 0;
    for (size_t i = 0; s[i] && i < 200 && o + 8 < sizeof buf; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '\\')
            o += (size_t)snprintf(buf + o, sizeof buf - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o] = '\0';
    return buf;
}

#endif
