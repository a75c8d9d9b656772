/* sdnotify.h - systemd service notifications (Type=notify) without linking libsystemd.
 *
 * Contract: sdnotify_send("READY=1") sends one datagram to the socket named by $NOTIFY_SOCKET
 * (a path, or an abstract name starting with '@'). Without $NOTIFY_SOCKET it does nothing and
 * returns 0, so the service runs the same outside systemd.
 */
#ifndef PGPACE_SDNOTIFY_H
#define PGPACE_SDNOTIFY_H

int sdnotify_send(const char *state);

#endif
