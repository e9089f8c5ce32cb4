#pragma once
/* Windows declares the socket API in winsock2.h and ws2tcpip.h (compat/win/README.md). */
#include <winsock2.h>
#include <ws2tcpip.h>
