/* timebase.h - the dispatcher's clock: monotonic, on the database server's time scale.
 *
 * Everything the dispatcher schedules in-process (the heap, send slots and their lookahead, the
 * window, breaker cooldowns, retry and lease timers, batch ticks) reads timebase_now_us():
 * CLOCK_MONOTONIC plus one offset, in microseconds since the Unix epoch as the database server
 * counts them. So
 *   - a step of this host's wall clock (NTP, a VM paused or migrated, a clock fixed by hand)
 *     moves nothing: no customer stalls for the step or sends early because of it;
 *   - a dispatcher on a host whose clock differs from the server's by seconds schedules exactly
 *     as one whose clock agrees, and times cross the SQL boundary as they are: next_action_at,
 *     a frontier tat and tick numbers read from SQL, an attempt's start and webhook-timestamp
 *     written or sent, all compare with the server's now().
 *
 * The offset is the only translation between the clocks and lives here. It starts as this
 * host's (CLOCK_REALTIME - CLOCK_MONOTONIC) and is then measured against the server
 * (timebase_sample: its clock_timestamp() and the monotonic times the question was sent and
 * answered, at each new connection and every TIMEBASE_SAMPLE_MS). The first sample, and any
 * later one that differs by more than TIMEBASE_STEP_US (the server's own clock was stepped, or
 * a failover reached a server whose clock differs), sets the offset at once; smaller
 * differences are slewed at most TIMEBASE_SLEW_PPM of elapsed time, so the clock never runs
 * backwards and a period is never shortened by more than 0.1 %. Samples whose round trip
 * exceeds TIMEBASE_MAX_RTT_US after the first are not used (their error is half of it).
 *
 * Dates are compared on the same scale (a Retry-After date, a client certificate's validity), so
 * a receiver sees the same from a dispatcher whose host clock is off as from one whose clock is
 * right. This host's wall clock is read only for log lines and, through timebase_wall_us(), for
 * the offset gauge that tells an operator a clock is wrong.
 *
 * The timebase struct and the tb_* functions are the pure core (the monotonic time is passed
 * in; unit-tested); timebase_* use one process-wide instance on the real clocks. Loop thread
 * only.
 */
#ifndef PGPACE_TIMEBASE_H
#define PGPACE_TIMEBASE_H

#include <stdbool.h>
#include <stdint.h>

#define TIMEBASE_STEP_US    500000 /* a larger difference is stepped, not slewed */
#define TIMEBASE_SLEW_PPM   1000   /* slewing changes the clock's rate by at most 0.1 % */
#define TIMEBASE_MAX_RTT_US 50000  /* later samples slower than this are not used */
#define TIMEBASE_SAMPLE_MS  30000  /* how often the dispatcher samples the server's clock */

typedef struct timebase {
    int64_t offset_us; /* server time - monotonic time, as applied now */
    int64_t target_us; /* the latest sample's offset, which offset_us slews towards */
    int64_t slewed_at; /* monotonic time offset_us was last brought up to date */
    bool sampled;      /* a server sample was taken */
} timebase;

/* What a sample did. */
typedef enum { TB_SAMPLE_IGNORED, TB_SAMPLE_SLEWED, TB_SAMPLE_STEPPED } tb_sample_result;

/* Starts at the wall clock's offset: wall_us - mono_us read together. */
void tb_init(timebase *tb, int64_t wall_us, int64_t mono_us);

/* The server-scale time at monotonic time mono_us (>= every earlier call's), bringing the slew
 * up to date. */
int64_t tb_now(timebase *tb, int64_t mono_us);

/* A sample: the server said server_us between sending at sent_mono_us and answering at
 * recv_mono_us. *delta_us (optional) gets the sample's offset minus the applied one. */
tb_sample_result tb_sample(timebase *tb, int64_t sent_mono_us, int64_t recv_mono_us,
                           int64_t server_us, int64_t *delta_us);

/* The process-wide clock. */
int64_t timebase_mono_us(void);
int64_t timebase_wall_us(void);
int64_t timebase_now_us(void);
tb_sample_result timebase_sample(int64_t sent_mono_us, int64_t recv_mono_us, int64_t server_us,
                                 int64_t *delta_us);

#endif
