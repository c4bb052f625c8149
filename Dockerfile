# syntax=docker/dockerfile:1
#
# logbook: build the one binary, run `logbook serve` as a non-root user with bubblewrap for
# the sandbox. See docs/deploy.md (Slack app, tokens, DATABASE_URL, migrations, compose).
#
#   docker build -t logbook .
#   docker run --rm logbook migrate up          # with DATABASE_URL set
#   docker run ... logbook                      # logbook serve

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/logbook ./cmd/logbook

FROM debian:bookworm-slim
# bubblewrap: the sandbox of the agent's commands; util-linux: prlimit, which sets their
# limits; ca-certificates: TLS to Slack and the model provider. Sandboxed commands see this
# image's /usr and /etc read-only: add here the tools the agent should have (git, curl...).
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap util-linux ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --user-group --create-home --home-dir /home/logbook --shell /usr/sbin/nologin logbook
COPY --from=build /out/logbook /usr/local/bin/logbook
USER logbook
WORKDIR /home/logbook
ENTRYPOINT ["/usr/local/bin/logbook"]
CMD ["serve"]
