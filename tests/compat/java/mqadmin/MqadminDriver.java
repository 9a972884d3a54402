import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.tools.command.MQAdminStartup;
import org.apache.rocketmq.tools.command.offset.ResetOffsetByTimeOldCommand;

/**
 * Runs mqadmin commands (rocketmq-tools' MQAdminStartup, as the mqadmin script does) one
 * after another in one JVM, each with "-n namesrv" added, and prints each command's output
 * as a JSON line: {"event": "command", "argv": [..], "output": "..", "error": bool}.
 *
 * <pre>
 * {"namesrv": "host:port", "commands": [["updateTopic", "-c", "DefaultCluster", "-t", "T"],
 *                                       ["topicList"], ...]}
 * </pre>
 *
 * Besides mqadmin's own commands, "resetOffsetByTimeOld" runs ResetOffsetByTimeOldCommand,
 * which mqadmin ships but does not register: the path its resetOffsetByTime falls back to
 * when a broker answers CONSUMER_NOT_ONLINE (GET_CONSUME_STATS, SEARCH_OFFSET_BY_TIMESTAMP
 * and UPDATE_CONSUMER_OFFSET for each queue).
 *
 * mqadmin reports a failure by printing a stack trace, never by an exit code: "error" is
 * true when the output (stdout and stderr together) holds one. A command line it cannot
 * parse makes it print its usage and call System.exit: that command's event then says
 * "exited": true, and it is the last.
 */
public final class MqadminDriver {
    private static volatile List<String> running;
    private static volatile ByteArrayOutputStream runningOutput;

    private MqadminDriver() {
    }

    public static void main(String[] args) {
        JsonObject spec = Out.readSpec(args);
        String namesrv = Out.str(spec, "namesrv", "");
        MQAdminStartup.initCommand(new ResetOffsetByTimeOldCommand());
        PrintStream previousOut = System.out;
        PrintStream previousErr = System.err;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            List<String> argv = running;
            if (argv != null) {
                Out.emit("command", "argv", argv, "output",
                    runningOutput.toString(StandardCharsets.UTF_8), "error", true, "exited", true);
            }
        }));
        for (JsonElement element : spec.getAsJsonArray("commands")) {
            List<String> argv = new ArrayList<>();
            for (JsonElement word : element.getAsJsonArray()) {
                argv.add(word.getAsString());
            }
            if (!argv.contains("-n") && !argv.isEmpty()) {
                argv.add("-n");
                argv.add(namesrv);
            }
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            PrintStream capture = new PrintStream(captured, true, StandardCharsets.UTF_8);
            System.setOut(capture);
            System.setErr(capture);
            runningOutput = captured;
            running = argv;
            long started = System.nanoTime();
            Throwable thrown = null;
            try {
                MQAdminStartup.main0(argv.toArray(new String[0]), null);
            } catch (Throwable t) {
                thrown = t;
            } finally {
                running = null;
                capture.flush();
                System.setOut(previousOut);
                System.setErr(previousErr);
            }
            String output = captured.toString(StandardCharsets.UTF_8);
            boolean error = thrown != null || output.contains("Exception") && output.contains("\tat ");
            Out.emit("command", "argv", argv, "output", output, "error", error,
                "thrown", thrown == null ? null : thrown.toString(),
                "ms", (System.nanoTime() - started) / 1_000_000);
        }
        Out.emit("done");
        System.exit(0);
    }
}
