-- 0024_wake.sql - wake-ups that do not serialise producers' commits (issue 34).
--
-- A transaction that has called NOTIFY takes one database-wide lock from just before its commit
-- until after it, WAL flush included, so notifying transactions commit one at a time: 8
-- producers enqueueing in their own transactions reached 787 commits/s here where the same
-- INSERT without a NOTIFY reached 3,647/s (bench/ENQUEUE.md). When the leader sees many
-- wake-ups it turns *hot*: it says so in wake_state, and polls `wake` every millisecond;
-- producers then leave their wake-ups in `wake` instead of notifying. When few come it turns
-- cold again, and producers notify. The protocol, its proof and the leader's side:
-- sql/functions/24_wake.sql and src/dispatch/wake.c.
--
-- Both tables are UNLOGGED: what they hold is worth nothing after a crash (an empty wake_state
-- is cold: producers notify; the next leader's backstop scan reads the queue itself), and a
-- producer's wake-up then costs no WAL.

-- One row while a leader is or was lately hot: producers skip NOTIFY while hot_until is ahead
-- of their statement's time. The leader moves hot_until on every second while hot, so a
-- leader that died hot is cold again within seconds (its successor first reads what was left).
CREATE UNLOGGED TABLE pgpace.wake_state (
    one       boolean PRIMARY KEY DEFAULT true CONSTRAINT wake_state_one CHECK (one),
    hot_until timestamptz NOT NULL
);

-- A row per producing backend (its process id), written only by that backend: its last
-- wake-ups, newest last, and how many it has made in all (seq, the number of the last one).
-- Only its own backend writes a row, so producers never wait for each other here; the leader
-- reads rows and never changes one while producers may write (it clears the table only when it
-- has turned cold behind the barrier of 24_wake.sql).
CREATE UNLOGGED TABLE pgpace.wake (
    backend integer PRIMARY KEY,
    seq     bigint NOT NULL,
    pairs   text[] NOT NULL
);
