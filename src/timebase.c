/* timebase.c - the dispatcher's clock; see timebase.h. */
#include "timebase.h"

#include <time.h>

void tb_init(timebase *tb, int64_t wall_us, int64_t mono_us)
{
    *tb = (timebase){.offset_us = wall_us - mono_us,
                     .target_us = wall_us - mono_us,
                     .slewed_at = mono_us,
                     .sampled = false};
}

/* Moves offset_us towards target_us by what the time since the last call allows. */
static void slew(timebase *tb, int64_t mono_us)
{
    int64_t gap = tb->target_us - tb->offset_us;
    if (gap == 0) {
        tb->slewed_at = mono_us;
        return;
    }
    int64_t elapsed = mono_us - tb->slewed_at;
    int64_t allowed = elapsed / (1000000 / TIMEBASE_SLEW_PPM);
    /* Under a microsecond's worth: the elapsed time counts towards the next call. */
    if (allowed <= 0)
        return;
    tb->slewed_at += allowed * (1000000 / TIMEBASE_SLEW_PPM);
    if (gap > allowed)
        gap = allowed;
    else if (gap < -allowed)
        gap = -allowed;
    tb->offset_us += gap;
}

int64_t tb_now(timebase *tb, int64_t mono_us)
{
    slew(tb, mono_us);
    return mono_us + tb->offset_us;
}

tb_sample_result tb_sample(timebase *tb, int64_t sent_mono_us, int64_t recv_mono_us,
                           int64_t server_us, int64_t *delta_us)
{
    int64_t rtt = recv_mono_us - sent_mono_us;
    if (rtt < 0 || (tb->sampled && rtt > TIMEBASE_MAX_RTT_US)) {
        if (delta_us)
            *delta_us = 0;
        return TB_SAMPLE_IGNORED;
    }
    slew(tb, recv_mono_us);
    /* The server read its clock somewhere in the round trip: assume half way. */
    int64_t offset = server_us - (sent_mono_us + rtt / 2);
    int64_t delta = offset - tb->offset_us;
    if (delta_us)
        *delta_us = delta;
    tb->target_us = offset;
    if (!tb->sampled || delta > TIMEBASE_STEP_US || delta < -TIMEBASE_STEP_US) {
        tb->sampled = true;
        tb->offset_us = offset;
        return TB_SAMPLE_STEPPED;
    }
    return TB_SAMPLE_SLEWED;
}

static int64_t read_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t timebase_mono_us(void)
{
    return read_clock(CLOCK_MONOTONIC);
}

int64_t timebase_wall_us(void)
{
    return read_clock(CLOCK_REALTIME);
}

static timebase process_clock;
static bool process_clock_ready;

static timebase *clock_get(void)
{
    if (!process_clock_ready) {
        tb_init(&process_clock, timebase_wall_us(), timebase_mono_us());
        process_clock_ready = true;
    }
    return &process_clock;
}

int64_t timebase_now_us(void)
{
    return tb_now(clock_get(), timebase_mono_us());
}

tb_sample_result timebase_sample(int64_t sent_mono_us, int64_t recv_mono_us, int64_t server_us,
                                 int64_t *delta_us)
{
    return tb_sample(clock_get(), sent_mono_us, recv_mono_us, server_us, delta_us);
}
