package headwater.jvm;

import java.util.Collection;
import java.util.Map;

/** Just enough JSON for the test programs' output: maps, collections, strings, numbers, booleans, null. */
final class Json {

    private Json() {
    }

    static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString();
    }

    private static void write(StringBuilder out, Object value) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Number || value instanceof Boolean) {
            out.append(value);
        } else if (value instanceof Map<?, ?> map) {
            out.append('{');
            String separator = "";
            for (Map.Entry<?, ?> entry : map.entrySet()) {
                out.append(separator);
                string(out, String.valueOf(entry.getKey()));
                out.append(": ");
                write(out, entry.getValue());
                separator = ", ";
            }
            out.append('}');
        } else if (value instanceof Collection<?> items) {
            out.append('[');
            String separator = "";
            for (Object item : items) {
                out.append(separator);
                write(out, item);
                separator = ", ";
            }
            out.append(']');
        } else {
            string(out, value.toString());   // enums, ids, topic-partitions: their names
        }
    }

    private static void string(StringBuilder out, String text) {
        out.append('"');
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }
}
