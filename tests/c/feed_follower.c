/* A C key-value store following a node's change feed through the shim's C ABI.
 *
 * prescient_c_feed_follow() opens a feed log (written by the Rust test through
 * prescient-dpu's FeedLog), reads from a cursor in small batches and checks every entry
 * against the sequence the test appends (feed_sequence in tests/support/lib.rs): each
 * position once, in order, with its version, key hash and tombstone.
 * prescient_c_feed_too_old() checks that a cursor whose next entries were overwritten
 * is refused with PRESCIENT_RC_CURSOR_TOO_OLD, naming the newest version overwritten.
 * Both return 0, or a negative line number of the first failed check. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "prescient.h"

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "c feed follower: check failed at line %d: %s (last error: %s)\n", \
                    __LINE__, #cond, prescient_last_error());                              \
            rc = -__LINE__;                                                                \
            goto out;                                                                      \
        }                                                                                  \
    } while (0)

/* The sequence of tests/support/lib.rs feed_sequence(). */
static uint64_t seq_version(uint64_t p) { return 3 * p + p % 3; }
static uint64_t seq_key_hash(uint64_t p) { return (p * 0x9e3779b97f4a7c15ull) ^ (p >> 3); }
static uint8_t seq_tombstone(uint64_t p) { return p % 11 == 0; }

int prescient_c_feed_follow(const char *path, uint64_t *cursor, uint64_t until_position, size_t batch) {
    int rc = 0;
    PrescientFeed *feed = NULL;
    PrescientFeedEntry entries[16];
    size_t n = 0;
    if (batch == 0 || batch > sizeof entries / sizeof entries[0]) {
        return -__LINE__;
    }
    /* Arguments the ABI refuses, each with its own rc. */
    CHECK(prescient_feed_open(NULL, &feed) == PRESCIENT_RC_INVALID);
    CHECK(prescient_feed_open("/nonexistent/prescient-feed", &feed) == PRESCIENT_RC_FEED);
    CHECK(strstr(prescient_last_error(), "/nonexistent/prescient-feed") != NULL);
    CHECK(prescient_feed_read(NULL, 0, entries, batch, &n) == PRESCIENT_RC_INVALID);

    CHECK(prescient_feed_open(path, &feed) == PRESCIENT_RC_OK);
    CHECK(prescient_feed_read(feed, *cursor, NULL, 4, &n) == PRESCIENT_RC_INVALID);
    /* The position after the cursor: the first whose version is above it. */
    uint64_t next = 1;
    while (seq_version(next) <= *cursor) {
        next++;
    }
    while (next <= until_position) {
        size_t want = until_position - next + 1 < batch ? (size_t)(until_position - next + 1) : batch;
        CHECK(prescient_feed_read(feed, *cursor, entries, want, &n) == PRESCIENT_RC_OK);
        /* The feed is written before the follower starts: it never runs dry early. */
        CHECK(n > 0 && n <= want);
        for (size_t i = 0; i < n; i++) {
            const PrescientFeedEntry *e = &entries[i];
            CHECK(e->position == next);
            CHECK(e->version == seq_version(next));
            CHECK(e->key_hash == seq_key_hash(next));
            CHECK(e->tombstone == seq_tombstone(next));
            *cursor = e->version;
            next++;
        }
    }
out:
    prescient_feed_close(feed);
    return rc;
}

int prescient_c_feed_too_old(const char *path, uint64_t cursor, uint64_t dropped) {
    int rc = 0;
    PrescientFeed *feed = NULL;
    PrescientFeedEntry entries[4];
    size_t n = 99;
    CHECK(prescient_feed_open(path, &feed) == PRESCIENT_RC_OK);
    CHECK(prescient_feed_read(feed, cursor, entries, 4, &n) == PRESCIENT_RC_CURSOR_TOO_OLD);
    CHECK(n == 0);
    /* The newest version overwritten, from the handle and in the message. */
    uint64_t seen = 0;
    CHECK(prescient_feed_dropped(feed, &seen) == PRESCIENT_RC_OK);
    CHECK(seen == dropped);
    char named[64];
    snprintf(named, sizeof named, "up to version %#" PRIx64, dropped);
    CHECK(strstr(prescient_last_error(), named) != NULL);
    CHECK(strstr(prescient_last_error(), "snapshot") != NULL);
    /* From the dropped version on, the feed is whole again. */
    CHECK(prescient_feed_read(feed, dropped, entries, 4, &n) == PRESCIENT_RC_OK);
    CHECK(n == 4 && entries[0].version > dropped);
out:
    prescient_feed_close(feed);
    return rc;
}
