# An application image that takes sockferry from the project's image, as packaging/README.md
# ("Your own image") shows, with curl as the application: the client of tests/containers.
FROM debian:bookworm-slim
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends curl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=sockferry /usr/bin/sockferry /usr/bin/sockferry
COPY --from=sockferry /usr/lib/sockferry/ /usr/lib/sockferry/
ENTRYPOINT ["sockferry", "run", "-c", "/etc/sockferry.conf", "--"]
HEALTHCHECK --interval=5s --timeout=10s --start-period=10s --retries=3 \
    CMD ["sockferry", "check", "--pid", "1"]
