"""Apache Kafka's command-line tools (jvm-deps-kafka.lock) run as Java clients: each tool is a JVM on
the locked jars, with its own log4j configuration (warnings to stderr)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.kafka_broker import java_command

TOOL_TIMEOUT = 120  # seconds: a JVM's start plus the work, on 2 loaded cores; a bound, not a speed


def run_tool(
    tmp_path: Path, main_class: str, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    log4j = tmp_path / "tools-log4j2.properties"
    log4j.write_text(
        "appender.err.type=Console\nappender.err.name=ERR\nappender.err.target=SYSTEM_ERR\n"
        "appender.err.layout.type=PatternLayout\nappender.err.layout.pattern=%p %m (%c)%n\n"
        "rootLogger.level=WARN\nrootLogger.appenderRef.err.ref=ERR\n"
    )
    return subprocess.run(
        java_command(main_class, *args, log4j=log4j),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT,
        check=False,
    )


def consumer_groups(
    tmp_path: Path, bootstrap: str, command_config: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """``kafka-consumer-groups.sh`` against ``bootstrap`` with the client settings file
    ``command_config``, then ``args`` (``--list``, ``--describe --group G``, ...)."""
    return run_tool(
        tmp_path,
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server",
        bootstrap,
        "--command-config",
        command_config,
        *args,
    )
