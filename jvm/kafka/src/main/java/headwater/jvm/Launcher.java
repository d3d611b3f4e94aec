package headwater.jvm;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.kafka.common.utils.internals.Exit;

/**
 * Runs Kafka tools' main classes one after another in this one JVM, so that a test pays the
 * JVM's start-up and class loading once rather than per tool.
 *
 * <p>Each invocation arrives on stdin as one line, {@code <stdin bytes>\t<main class>\t<arg>...},
 * followed by that many bytes, which the tool reads as its System.in. The answer goes to the
 * real stdout as one line, {@code <exit code>\t<stdout bytes>\t<stderr bytes>}, followed by the
 * tool's captured stdout and stderr. A tool's {@code Exit.exit} or {@code Exit.halt} ends the
 * invocation with that code instead of the JVM; a main that returns exits 0, one that throws
 * exits 1 with its stack trace on stderr, as the {@code java} command would. (A tool that
 * calls Exit inside its own catch-all prints this launcher's ExitRequested on its stderr.) Between
 * invocations System.out and System.err are the JVM's stderr, so what a tool's leftover
 * threads print cannot garble the answers.
 *
 * <p>A tool that calls System.exit (argparse4j on bad arguments) ends the JVM: a shutdown hook
 * still answers with what the tool printed, its exit code {@code -}, and the caller takes the
 * JVM's exit status as the tool's.
 */
public final class Launcher {

    /** Thrown in place of leaving the JVM; carries the first exit code a tool asked for. */
    private static final class ExitRequested extends RuntimeException {
        ExitRequested() {
            super(null, null, false, false);
        }
    }

    // Tools catch Throwable and exit again with another code: the first request wins.
    private static volatile Integer exitCode;
    // The running invocation's captured output, for the shutdown hook should it call System.exit.
    private static volatile ByteArrayOutputStream[] running;

    public static void main(String[] args) throws IOException {
        PrintStream idle = new PrintStream(new FileOutputStream(FileDescriptor.err), true);
        OutputStream answers = new FileOutputStream(FileDescriptor.out);
        Exit.Procedure leave = (code, message) -> {
            if (exitCode == null) {
                exitCode = code;
            }
            throw new ExitRequested();
        };
        Exit.setExitProcedure(leave);
        Exit.setHaltProcedure(leave);
        System.setOut(idle);
        System.setErr(idle);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            ByteArrayOutputStream[] output = running;
            if (output != null) {
                System.out.flush();
                System.err.flush();
                answer(answers, "-", output[0], output[1]);
            }
        }));
        DataInputStream requests = new DataInputStream(System.in);
        String line;
        while ((line = readLine(requests)) != null) {
            String[] fields = line.split("\t", -1);
            byte[] input = requests.readNBytes(Integer.parseInt(fields[0]));
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            System.setIn(new ByteArrayInputStream(input));
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            running = new ByteArrayOutputStream[] {out, err};
            int code;
            try {
                code = run(fields[1], Arrays.copyOfRange(fields, 2, fields.length));
            } finally {
                running = null;
                System.out.flush();
                System.err.flush();
                System.setOut(idle);
                System.setErr(idle);
            }
            answer(answers, Integer.toString(code), out, err);
        }
    }

    private static void answer(OutputStream answers, String code, ByteArrayOutputStream out, ByteArrayOutputStream err) {
        try {
            answers.write((code + "\t" + out.size() + "\t" + err.size() + "\n").getBytes(StandardCharsets.UTF_8));
            out.writeTo(answers);
            err.writeTo(answers);
            answers.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static int run(String mainClass, String[] args) {
        exitCode = null;
        try {
            Class.forName(mainClass).getMethod("main", String[].class).invoke(null, (Object) args);
            return exitCode == null ? 0 : exitCode;
        } catch (InvocationTargetException e) {
            if (exitCode != null) {
                return exitCode;
            }
            e.getCause().printStackTrace();
            return 1;
        } catch (ReflectiveOperationException e) {
            e.printStackTrace();
            return 1;
        }
    }

    /** One UTF-8 line without its newline, or null at the end of input. */
    private static String readLine(InputStream in) throws IOException {
        ByteArrayOutputStream line = new ByteArrayOutputStream();
        int b;
        while ((b = in.read()) != '\n') {
            if (b < 0) {
                return line.size() == 0 ? null : line.toString(StandardCharsets.UTF_8);
            }
            line.write(b);
        }
        return line.toString(StandardCharsets.UTF_8);
    }
}
