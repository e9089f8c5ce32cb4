#pragma once
/* struct sockaddr_un: Windows 10 1803+ (compat/win/README.md). */
#include <winsock2.h>
#include <ws2tcpip.h>
#include <afunix.h>
