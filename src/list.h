/* list.h - an intrusive, circular, doubly linked list.
 *
 * Contract: a list is a pgp_list head; an element embeds a pgp_list node and is found from it
 * with pgp_list_entry(). The list owns nothing: it never allocates or frees. A node that is
 * not on a list points at itself (pgp_list_init or pgp_list_remove leave it so), which makes
 * removing it twice harmless. Insertion and removal are O(1). Removing the element being
 * visited is safe only with pgp_list_each_safe.
 */
#ifndef PGPACE_LIST_H
#define PGPACE_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct pgp_list {
    struct pgp_list *prev, *next;
} pgp_list;

static inline void pgp_list_init(pgp_list *l)
{
    l->prev = l->next = l;
}

static inline bool pgp_list_empty(const pgp_list *head)
{
    return head->next == head;
}

/* Inserts node at the front of the list. */
static inline void pgp_list_push(pgp_list *head, pgp_list *node)
{
    node->next = head->next;
    node->prev = head;
    head->next->prev = node;
    head->next = node;
}

/* Inserts node at the back of the list (a FIFO takes from the front). */
static inline void pgp_list_push_tail(pgp_list *head, pgp_list *node)
{
    pgp_list_push(head->prev, node);
}

static inline void pgp_list_remove(pgp_list *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->prev = node->next = node;
}

#define pgp_list_entry(node, type, member) ((type *)(void *)((char *)(node)-offsetof(type, member)))

#define pgp_list_each(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

/* As pgp_list_each, but pos may be removed (or freed) in the loop body. */
#define pgp_list_each_safe(pos, tmp, head)                                                         \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);                               \
         (pos) = (tmp), (tmp) = (pos)->next)

#endif
