#pragma once
/* The one intrusive doubly linked list of the relay: a node lives inside the object it links
 * (sf_list_entry finds the object again), so linking allocates nothing and unlinking is O(1).
 * The ends are NULL-terminated and no node points back at the list head, so a head may be
 * moved or copied with its list (the pre-auth budget's source table moves its entries).
 * Unlinking a node that is not on the list does nothing: every object's teardown can call it,
 * once or twice. */
#include <stdbool.h>
#include <stddef.h>

struct sf_list_node {
        struct sf_list_node *prev, *next;
        bool linked;
};

struct sf_list {
        struct sf_list_node *first, *last;
        size_t n;
};

#define sf_list_entry(node, type, member) ((type *)(void *)((char *)(node) - offsetof(type, member)))

static inline void sf_list_push_back(struct sf_list *l, struct sf_list_node *n) {
        if (n->linked)
                return;
        n->linked = true;
        n->next = NULL;
        n->prev = l->last;
        if (l->last)
                l->last->next = n;
        else
                l->first = n;
        l->last = n;
        l->n++;
}

static inline void sf_list_remove(struct sf_list *l, struct sf_list_node *n) {
        if (!n->linked)
                return;
        n->linked = false;
        if (n->prev)
                n->prev->next = n->next;
        else
                l->first = n->next;
        if (n->next)
                n->next->prev = n->prev;
        else
                l->last = n->prev;
        n->prev = n->next = NULL;
        l->n--;
}

static inline bool sf_list_empty(const struct sf_list *l) {
        return l->first == NULL;
}
