# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_tollgate_global_optspecs
    string join \n h/help V/version
end

function __fish_tollgate_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_tollgate_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_tollgate_using_subcommand
    set -l cmd (__fish_tollgate_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c tollgate -n "__fish_tollgate_needs_command" -s h -l help -d 'Print help'
complete -c tollgate -n "__fish_tollgate_needs_command" -s V -l version -d 'Print version'
complete -c tollgate -n "__fish_tollgate_needs_command" -f -a "simulate" -d 'Replay a trace of requests through rate-limiting strategies'
complete -c tollgate -n "__fish_tollgate_needs_command" -f -a "check" -d 'Validate a policy file and print its effective policies'
complete -c tollgate -n "__fish_tollgate_needs_command" -f -a "serve" -d 'Run the rate-limit decision service (HTTP JSON API, proxy auth, Envoy\'s gRPC API)'
complete -c tollgate -n "__fish_tollgate_needs_command" -f -a "completions" -d 'Print a shell completion script for tollgate'
complete -c tollgate -n "__fish_tollgate_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l trace -d 'The trace to replay: CSV with columns time, key and optionally cost and resource, or an access log with --format nginx (see --help)' -r -F
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l format -d 'How the trace is written: csv, or nginx for an nginx/Apache access log' -r -f -a "csv\t'CSV with a header row: time, key and optionally cost and resource (see --help)'
nginx\t'An nginx or Apache access log in the combined (or common) log format (see --help)'"
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l strategy -d 'The strategy to run, or all four (required unless --config is given)' -r -f -a "fixed_window\t'A counter per clock-aligned window'
sliding_window\t'Two counters weighted by the position in the window'
token_bucket\t'Tokens refilled continuously'
leaky_bucket\t'A meter draining continuously'
all\t'All four, one after the other'"
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l limit -d 'Units admitted per window and key, at least 1 (required unless --config is given)' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l window -d 'The window, e.g. 250ms, 1s, 1m, 1h or 1m 30s (required unless --config is given)' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l config -d 'Replay against this policy file\'s limiter instead of --strategy, --limit and --window: each request is decided by its resource\'s policy (the trace\'s resource column, or the path of an access log), or the file\'s default policy. See `tollgate check --help` for the file; the replay runs in memory, or on Redis or PostgreSQL with --backend redis or --backend postgres, whatever storage the file names' -r -F
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l decisions -d 'Write one CSV row per request, in input order, to this file (one file with --config). With --strategy all, write one file per strategy, the strategy name inserted before the extension: out.csv becomes out.fixed_window.csv, out.sliding_window.csv, out.token_bucket.csv and out.leaky_bucket.csv; when OUT is an existing directory, the files are OUT/fixed_window.csv, OUT/sliding_window.csv, OUT/token_bucket.csv and OUT/leaky_bucket.csv (a directory is an error otherwise)' -r -F
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l max-delay -d 'Wait up to this long for a turn instead of being refused (e.g. 500ms): each request is reserved, as a client of `acquire` or of the service\'s max_delay_ms would be, and admitted when the reservation is made, counted when it proceeds; the summary then adds each policy\'s delays (requests delayed, p50, p99, max). The token and leaky bucket reserve the next slots their rate allows, a sliding window the next slots within its current window; a policy with a fixed window admits only what it admits now. Replayed in memory' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l backend -d 'Where the state lives: in memory, on the Redis server at --redis-url or on the PostgreSQL database at --postgres-url (see --help)' -r -f -a "memory\t'In this process (the library\'s in-memory backend)'
redis\t'On a Redis server, decided by the Redis backend\'s Lua scripts (needs --redis-url)'
postgres\t'On a PostgreSQL database, decided by the PostgreSQL backend\'s SQL functions (needs --postgres-url)'"
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l redis-url -d 'The Redis server for --backend redis: redis://[user:password@]host[:port][/db], rediss://... for TLS, or redis+unix:///path/to/socket. Its keys under tollgate-simulate/<run> are deleted when the run ends' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l postgres-url -d 'The database for --backend postgres: postgres://[user[:password]@]host[:port]/database (TLS as its parameters, such as ?sslmode=require). The run installs the backend into a schema of its own, tollgate_simulate_<run>, dropped when the run ends: the role needs CREATE on the database' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l plot -d 'Draw a chart of one key\'s admitted and denied requests over time, one panel per strategy (with --config, per policy the key\'s requests fell under; a policy of several limits is drawn with the limit its summary row measures, named in the panel\'s caption), to this file: SVG or PNG, chosen by the extension (.svg or .png)' -r -F
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l key -d 'The key to plot with --plot (default: the key with the most requests)' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l plot-size -d 'The chart\'s size in pixels, WIDTHxHEIGHT (default: 1000 wide, 260 high per panel plus 70 for the title)' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -l skip-invalid -d 'Leave invalid data lines out of the replay instead of stopping at the first; a warning after the summary counts them and names the first few (see --help)'
complete -c tollgate -n "__fish_tollgate_using_subcommand simulate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tollgate -n "__fish_tollgate_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l config -d 'A tollgate policy file or an Envoy rate-limit configuration (repeatable)' -r -F
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l listen -d 'The HTTP listener\'s address' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l grpc-listen -d 'Serve Envoy\'s rate-limit gRPC API on this address' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l auth-deny-status -d 'The status of a denial on /v1/auth, from 400 to 499 (nginx\'s auth_request needs 403)' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l envoy-headers -d 'The rate-limit headers the gRPC answers ask Envoy to add to the response' -r -f -a "ratelimit\t'`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (envoyproxy/ratelimit\'s default names)'
x-ratelimit\t'`X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (envoyproxy/ratelimit with LIMIT_*_HEADER set to them)'
ietf-draft\t'The IETF draft\'s `RateLimit-Policy` and `RateLimit`'
off\t'None (`Retry-After` still comes with a denial)'"
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l max-limit-override -d 'The largest limit a request may name for itself (POST /v1/decide\'s "limit"); 0 refuses them all' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l admin-token-file -d 'A file holding the bearer token the admin routes require' -r -F
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l permit-key-file -d 'A file holding the secret (at least 16 bytes) that signs the permits POST /v1/acquire hands out; replicas sharing a store must share it. Without one, each process signs with a random key' -r -F
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l header-read-timeout -d 'How long an HTTP/1.1 request head may take from its first byte; slower clients are disconnected' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l idle-timeout -d 'How long a connection with no request in flight stays open' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l max-connections -d 'The most connections open at once, HTTP and gRPC together; at the cap new ones wait' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l drain-timeout -d 'How long draining may take after SIGTERM before open connections are closed' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l drain-delay -d 'How long to go on serving after SIGTERM, with /readyz answering 503, before draining: the time a load balancer or Kubernetes takes to stop sending new connections' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l state-file -d 'Keep in-memory counts in this file across restarts: read at start, written atomically every --state-interval and after draining' -r -F
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l state-interval -d 'How often --state-file is written: a kill without draining loses at most this much of the decisions' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l grpc-threads -d 'Threads serving the gRPC listener\'s connections, each connection wholly on one (default: one per core; 0: the shared workers)' -r
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l log-format -d 'How log lines on standard error are written' -r -f -a "text\t'Lines for people: time, level, target and message'
json\t'One JSON object per line, the event\'s fields at the top level'"
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l no-admin -d 'Turn the admin routes off (they answer 404): the service may then listen on any address without a token. Decisions, health, metrics and /ui stay'
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -l discard-invalid-state -d 'Start empty when --state-file cannot be restored (damaged, cut short, not a state file), moving it to FILE.invalid'
complete -c tollgate -n "__fish_tollgate_using_subcommand serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tollgate -n "__fish_tollgate_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tollgate -n "__fish_tollgate_using_subcommand help; and not __fish_seen_subcommand_from simulate check serve completions help" -f -a "simulate" -d 'Replay a trace of requests through rate-limiting strategies'
complete -c tollgate -n "__fish_tollgate_using_subcommand help; and not __fish_seen_subcommand_from simulate check serve completions help" -f -a "check" -d 'Validate a policy file and print its effective policies'
complete -c tollgate -n "__fish_tollgate_using_subcommand help; and not __fish_seen_subcommand_from simulate check serve completions help" -f -a "serve" -d 'Run the rate-limit decision service (HTTP JSON API, proxy auth, Envoy\'s gRPC API)'
complete -c tollgate -n "__fish_tollgate_using_subcommand help; and not __fish_seen_subcommand_from simulate check serve completions help" -f -a "completions" -d 'Print a shell completion script for tollgate'
complete -c tollgate -n "__fish_tollgate_using_subcommand help; and not __fish_seen_subcommand_from simulate check serve completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
