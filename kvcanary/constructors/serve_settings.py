"""Contract of ``ServeSettings(host=..., port=..., sweep_interval=...)``: where the served canary listens and how
often it sweeps, checked before anything is done (``CanaryServer`` builds them first: no model loaded, no socket
bound; ``kvcanary serve`` before ``--tiny`` writes its model).

Whether the address can be bound (a name that resolves, a port that is free) is the machine's answer, not a
rule here: ``CanaryServer.start`` binds its socket before it loads the model.
"""

from kvcanary.constructors._settings import count, setting, settings_contract, validator
from kvcanary_contracts import Relation

MAX_PORT = 65535
"""The largest TCP port number."""

ServeSettingsContract = settings_contract(
    "ServeSettings", "F", "Where transformers' server with canaries listens, and how often the canary sweeps.", {
        "host": setting(str, "The address to listen on: an IP address or a host name (127.0.0.1 by default)."),
        "port": setting(int, "The TCP port to listen on, 0 to 65535 (0: any free port, read back from url)."),
        "sweep_interval": count(
            "Steps between two sweeps of the prefix cache (0: no sweep), as attach_canaries takes it.", minimum=0,
            why="It counts steps; a negative interval means nothing.", fix="Pass 0 to turn the sweep off."),
    },
    rules=(
        Relation(
            name="host_named", require="len(host.strip()) > 0",
            message="ServeSettings.host must name an address to listen on (an IP address or a host name), "
                    "got {host!r}",
            why="The server binds this address and prints it in its url; an empty one names no address (the "
                "socket would listen on every interface, while the url named none).",
            fix="Pass 127.0.0.1 (the default), 0.0.0.0 to listen on every interface, or a host name.",
            breaks={"host": "''"}),
        Relation(
            name="host_bare",
            require="' ' not in host and '/' not in host and '[' not in host and ']' not in host "
                    "and host.count(':') != 1",
            message="ServeSettings.host must be a bare address (an IP address or a host name: no scheme, no "
                    "port, no brackets, no spaces), got {host!r}",
            why="The host is handed to the socket as it is: a url (http://...), a host:port pair or a "
                "bracketed IPv6 address is no address the socket can bind; the port is its own setting.",
            fix="Pass the address alone (127.0.0.1, ::1, localhost) and the port as port.",
            breaks={"host": "'localhost:8000'"}),
        Relation(
            name="port_in_range", require="port >= 0 and port <= MAX_PORT",
            message="ServeSettings.port must be a TCP port from 0 to 65535 (0: any free port), got {port}",
            why="A TCP port is a 16-bit number; the socket refuses any other, and it would refuse it only after "
                "the model was loaded.",
            fix="Pass a port from 1 to 65535, or 0 to let the OS pick a free one.",
            breaks={"port": "70000"}),
    ),
    constants={"MAX_PORT": MAX_PORT},
)

validate_serve_settings = validator(ServeSettingsContract)
