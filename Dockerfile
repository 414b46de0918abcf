# Guard: a static binary on distroless, running as an unprivileged user.
#   docker build -t guard .
#   docker run --rm -p 8080:8080 guard            # embedded defaults
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
# The SDK is its own module, which go.mod replaces with ./sdk.
COPY sdk/go.mod sdk/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/guard ./cmd/guard \
 && mkdir -p /out/spool

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/guard /usr/local/bin/guard
# The audit spool must survive restarts: mount a volume here. The directory
# belongs to the nonroot user (65532) so a fresh named volume does too.
COPY --from=build --chown=65532:65532 /out/spool /var/lib/guard/spool
ENV GUARD_LISTEN=0.0.0.0:8080 \
    GUARD_SPOOL_DIR=/var/lib/guard/spool \
    GUARD_LOG_FORMAT=json
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/guard"]
CMD ["serve"]
