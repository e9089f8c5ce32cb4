#include "relay/link/client.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* How much of a wrong peer's first bytes its message quotes: a banner such as SSH's is
 * recognisable by its first 40. */
#define WRONG_PEER_QUOTE 40

void sf_hs_client_reset(struct sf_hs_client *h) {
        h->kind = SF_LINK_OK;
        h->msg[0] = h->reason[0] = '\0';
        h->hello_done = false;
        h->sent_flags = 0;
        h->have = 0;
}

size_t sf_hs_client_need(const struct sf_hs_client *h) {
        if (!h->hello_done)
                return SF_HS_HELLO_LEN - h->have;
        if (h->have < 2)
                return 2 - h->have;
        return sf_hs_status_frame_len(h->in, h->have) - h->have;
}

static size_t take(struct sf_hs_client *h, const uint8_t *in, size_t n, size_t want) {
        size_t k = want < n ? want : n;
        memcpy(h->in + h->have, in, k);
        h->have += k;
        return k;
}

static enum sf_hsc_step failed(struct sf_hs_client *h, enum sf_link_err kind) {
        h->kind = kind;
        return SF_HSC_FAILED;
}

static enum sf_hsc_step hello_input(struct sf_hs_client *h, const uint8_t *in, size_t n, size_t *used) {
        *used = take(h, in, n, SF_HS_HELLO_LEN - h->have);
        size_t cmp = h->have < SF_HS_MAGIC_LEN ? h->have : SF_HS_MAGIC_LEN;
        if (memcmp(h->in, SF_HS_MAGIC, cmp) != 0) {
                /* Not a relay: its next bytes, if they came along, make it recognisable. */
                *used += take(h, in + *used, n - *used, WRONG_PEER_QUOTE - h->have);
                return failed(h, sf_link_wrong_peer(h->in, h->have, h->ep, h->msg, sizeof h->msg));
        }
        if (h->have < SF_HS_HELLO_LEN)
                return SF_HSC_MORE;
        uint8_t version = 0;
        int r = sf_hs_hello_parse(h->in, h->snonce, &version);
        if (r == -EPROTONOSUPPORT)
                return failed(h, sf_link_version_mismatch(version, h->ep, h->msg, sizeof h->msg));
        if (r < 0)
                return failed(h, sf_link_wrong_peer(h->in, h->have, h->ep, h->msg, sizeof h->msg));
        h->hello_done = true;
        h->have = 0;
        return SF_HSC_FRAME;
}

static enum sf_hsc_step status_done(struct sf_hs_client *h) {
        enum sf_hs_status st;
        char reason[SF_HS_REASON_MAX + 1];
        int r = sf_hs_status_parse(h->in, h->have, h->key, h->snonce, h->cnonce, &st, reason);
        if (r == 0 && st == SF_HS_BAD_FRAME && (h->sent_flags & (SF_HS_FLAG_LINK | SF_HS_FLAG_SERVICE))) {
                /* It verified our frame but not what its flags ask: a relay from before them. A
                 * service the forward named cannot be checked by it: refused, not dropped. */
                if ((h->sent_flags & SF_HS_FLAG_SERVICE) && h->service_set) {
                        snprintf(h->msg, sizeof h->msg,
                                 "unknown service: the host relay at %s is an older sockferry that cannot check the "
                                 "service name: upgrade it, or remove service = from [%s]",
                                 h->ep, h->forward ? h->forward : "the forward");
                        return failed(h, SF_LINK_OTHER);
                }
                return SF_HSC_OLD_PEER;
        }
        if (r == 0 && st == SF_HS_UNKNOWN_SERVICE) {
                snprintf(h->msg, sizeof h->msg, "unknown service: the host relay at %s does not offer %s: %s", h->ep,
                         h->service ? h->service : "the forward's", reason[0] ? reason : "no reason given");
                return failed(h, SF_LINK_WRONG_PEER);
        }
        enum sf_link_err kind = sf_link_status_explain(r, st, reason, h->ep, h->token_file, h->msg, sizeof h->msg);
        if (kind != SF_LINK_OK)
                return failed(h, kind);
        snprintf(h->reason, sizeof h->reason, "%s", reason);
        return SF_HSC_OK;
}

enum sf_hsc_step sf_hs_client_input(struct sf_hs_client *h, const uint8_t *in, size_t n, size_t *used) {
        if (!h->hello_done)
                return hello_input(h, in, n, used);
        *used = 0;
        if (h->have < 2)
                *used += take(h, in, n, 2 - h->have);
        if (h->have < 2)
                return SF_HSC_MORE;
        *used += take(h, in + *used, n - *used, sf_hs_status_frame_len(h->in, h->have) - h->have);
        if (h->have < sf_hs_status_frame_len(h->in, h->have))
                return SF_HSC_MORE;
        return status_done(h);
}

size_t sf_hs_client_frame(struct sf_hs_client *h, uint8_t out[SF_HSC_FRAME_MAX]) {
        uint8_t flags = h->flags;
        if (h->service)
                flags |= SF_HS_FLAG_SERVICE | (h->service_set ? 0 : SF_HS_FLAG_DEFAULT);
        sf_hs_nonce_new(h->cnonce);
        sf_hs_client_build(out, h->key, h->snonce, h->cnonce, flags);
        size_t n = SF_HS_CLIENT_LEN;
        if (h->service)
                n += sf_hs_service_build(out + n, h->key, h->snonce, h->cnonce, h->service);
        h->sent_flags = flags;
        return n;
}

enum sf_hsc_step sf_hs_client_eof(struct sf_hs_client *h) {
        if (!h->hello_done)
                return failed(h, sf_link_hello_eof(h->have, h->ep, h->msg, sizeof h->msg));
        return failed(h, sf_link_status_eof(h->ep, h->msg, sizeof h->msg));
}

enum sf_hsc_step sf_hs_client_timeout(struct sf_hs_client *h, uint64_t ms) {
        if (!h->hello_done)
                return failed(h, sf_link_hello_timeout(ms, h->ep, h->msg, sizeof h->msg));
        return failed(h, sf_link_status_timeout(h->ep, h->msg, sizeof h->msg));
}
