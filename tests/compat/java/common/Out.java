import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.UnsupportedEncodingException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What every Java driver shares: the JSON spec it reads (the first argument, else standard
 * input) and the JSON lines it prints, one per event, on a stdout of its own (the clients'
 * own logging goes to files or stderr, never among the events).
 */
public final class Out {
    private static final Gson GSON = new GsonBuilder().disableHtmlEscaping().create();
    private static final PrintStream EVENTS = eventStream();

    private Out() {
    }

    private static PrintStream eventStream() {
        PrintStream original = System.out;
        System.setOut(System.err); // a library printing to stdout cannot garble an event
        try {
            return new PrintStream(original, true, "UTF-8");
        } catch (UnsupportedEncodingException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Print one event: {"event": name, key: value, ...}. */
    public static void emit(String event, Object... keyValues) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("event", event);
        for (int i = 0; i + 1 < keyValues.length; i += 2) {
            line.put(String.valueOf(keyValues[i]), keyValues[i + 1]);
        }
        String text = GSON.toJson(line);
        synchronized (EVENTS) {
            EVENTS.println(text);
        }
    }

    /** An error event for a failed operation: its type and message. */
    public static void failed(String event, Throwable error, Object... keyValues) {
        Object[] all = new Object[keyValues.length + 6];
        System.arraycopy(keyValues, 0, all, 0, keyValues.length);
        Throwable root = error;
        while (root.getCause() != null && (root instanceof java.util.concurrent.ExecutionException
            || root instanceof java.util.concurrent.CompletionException)) {
            root = root.getCause();
        }
        all[keyValues.length] = "type";
        all[keyValues.length + 1] = root.getClass().getSimpleName();
        all[keyValues.length + 2] = "message";
        all[keyValues.length + 3] = String.valueOf(root.getMessage());
        List<String> causes = new ArrayList<>();
        for (Throwable cause = root.getCause(); cause != null && causes.size() < 5; cause = cause.getCause()) {
            causes.add(cause.getClass().getSimpleName() + ": " + cause.getMessage());
        }
        all[keyValues.length + 4] = "causes";
        all[keyValues.length + 5] = causes;
        emit(event, all);
    }

    /** One kind of spec step: what a driver does for a step whose "do" names it. */
    public interface Step {
        void run(JsonObject step) throws Exception;
    }

    /**
     * Runs each step with the handler its "do" names, reports each failure as a step_failed
     * event, prints done and exits 0 (the events say what failed; client threads that
     * linger must not hold the process).
     */
    public static void runSteps(List<JsonObject> steps, int failedSteps, Map<String, Step> handlers) {
        for (JsonObject step : steps) {
            String what = str(step, "do", "");
            try {
                Step handler = handlers.get(what);
                if (handler == null) {
                    throw new IllegalArgumentException("unknown step " + what);
                }
                handler.run(step);
            } catch (Throwable t) {
                failed("step_failed", t, "step", what);
                failedSteps++;
            }
        }
        emit("done", "failed_steps", failedSteps);
        System.exit(0);
    }

    public static JsonObject readSpec(String[] args) {
        if (args.length > 0 && !args[0].equals("-")) {
            return JsonParser.parseString(args[0]).getAsJsonObject();
        }
        return JsonParser.parseReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))
            .getAsJsonObject();
    }

    public static String str(JsonObject o, String key, String fallback) {
        JsonElement e = o.get(key);
        return e == null || e.isJsonNull() ? fallback : e.getAsString();
    }

    public static long num(JsonObject o, String key, long fallback) {
        JsonElement e = o.get(key);
        return e == null || e.isJsonNull() ? fallback : e.getAsLong();
    }

    public static double real(JsonObject o, String key, double fallback) {
        JsonElement e = o.get(key);
        return e == null || e.isJsonNull() ? fallback : e.getAsDouble();
    }

    /**
     * How long a transaction step keeps its producer after the checks it waited for, unless
     * the step says ("linger_s"): the client answers a check after its checker returns, so a
     * producer shut down at once can take the answer with it; 3 s outlasts the tests' check
     * interval, so an answer lost anyway is asked for again.
     */
    public static double checkAnswerLingerS(JsonObject step) {
        return real(step, "linger_s", num(step, "checks", 0) > 0 ? 3 : 0);
    }

    public static boolean bool(JsonObject o, String key, boolean fallback) {
        JsonElement e = o.get(key);
        return e == null || e.isJsonNull() ? fallback : e.getAsBoolean();
    }

    public static List<String> strings(JsonObject o, String key) {
        List<String> out = new ArrayList<>();
        JsonElement e = o.get(key);
        if (e == null || e.isJsonNull()) {
            return out;
        }
        if (e.isJsonPrimitive()) {
            out.add(e.getAsString());
            return out;
        }
        for (JsonElement item : e.getAsJsonArray()) {
            out.add(item.getAsString());
        }
        return out;
    }

    public static List<JsonObject> objects(JsonObject o, String key) {
        List<JsonObject> out = new ArrayList<>();
        JsonElement e = o.get(key);
        if (e != null && e.isJsonArray()) {
            for (JsonElement item : (JsonArray) e) {
                out.add(item.getAsJsonObject());
            }
        }
        return out;
    }

    public static Map<String, String> stringMap(JsonObject o, String key) {
        Map<String, String> out = new LinkedHashMap<>();
        JsonElement e = o.get(key);
        if (e != null && e.isJsonObject()) {
            for (Map.Entry<String, JsonElement> entry : e.getAsJsonObject().entrySet()) {
                out.put(entry.getKey(), entry.getValue().getAsString());
            }
        }
        return out;
    }

    public static void sleepMillis(long millis) {
        try {
            Thread.sleep(Math.max(0, millis));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    public static String utf8(byte[] body) {
        return new String(body, StandardCharsets.UTF_8);
    }

    public static byte[] bytes(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }
}
