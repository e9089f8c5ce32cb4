#include "relay/conn/state.h"

/* The byte pump: both directions as far as readiness allows, through the primitives of
 * direction.c, with backpressure (a direction reads only once what it read before is written)
 * and half-close (an EOF is passed on with shutdown once its bytes are out), and a bound per
 * loop turn: a busy connection yields to the others. */

/* Moves bytes from side `from` to the other side while both are ready; what the other side
 * does not take stays queued and reading `from` waits until it drains (backpressure). After
 * PUMP_ROUNDS reads the connection yields to the others and continues in a deferred call.
 * 0 or -errno. */
static int pump(struct sf_conn *c, int from) {
        struct dir *d = &c->dir[from];
        /* Bytes the engine took with a send are not written yet while it still sends them (the
         * portable engine's outbox): reading on would hold a second buffer per direction for a
         * peer that does not read (its write's end reports SF_EV_OUT, which comes back here). */
        for (int round = 0; !d->eof && !dir_pending(d) && c->rd[from] && !sf_side_sending(c, 1 - from);
             round++) {
                if (round == PUMP_ROUNDS) {
                        sf_side_yield(c);
                        return 0;
                }
                if (!sf_dir_room(c, from))
                        break;
                int r = sf_dir_read(c, from);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                r = sf_dir_flush(c, from);
                if (r < 0)
                        return r;
        }
        if (!dir_pending(d)) {
                /* Held bytes stay for the next candidate until the stream answers. */
                if (!d->held)
                        sf_dir_release(c, from);
                /* An EOF that came while nothing was queued (the early bytes went to a
                 * candidate that failed) is passed on here. */
                sf_dir_pass_eof(c, from);
        }
        return 0;
}

void sf_conn_relay_step(struct sf_conn *c) {
        for (int from = 0; from < 2; from++) {
                int r = 0;
                if (dir_pending(&c->dir[from]) && c->wr[1 - from])
                        r = sf_dir_flush(c, from);
                if (r == 0)
                        r = pump(c, from);
                if (r < 0) {
                        sf_conn_io_error(c, -r);
                        return;
                }
        }
        /* Done once the last bytes are out too: the portable engine's outbox would lose them
         * in the close (its write's end reports SF_EV_OUT, which comes back here). */
        if (c->dir[CLIENT].shut && c->dir[UPSTREAM].shut && !sf_side_sending(c, CLIENT) &&
            !sf_side_sending(c, UPSTREAM))
                sf_conn_close(c, "both directions done");
}
