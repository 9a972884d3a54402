/**
 * Counts RECEIPTS receipts on a consumer's thread (LoadSteps.received) while the main
 * thread ends STEPS steps or more (LoadSteps.endStep), as a load driver's steps end while
 * its consumer receives; prints what the ended steps counted and the total received.
 */
public final class LoadStepsCheck {
    private LoadStepsCheck() {
    }

    public static void main(String[] args) throws InterruptedException {
        int receipts = Integer.parseInt(args[0]);
        int steps = Integer.parseInt(args[1]);
        Thread consumer = new Thread(() -> {
            for (int i = 0; i < receipts; i++) {
                LoadSteps.received(System.currentTimeMillis());
            }
        });
        consumer.start();
        long counted = 0;
        int ended = 0;
        while (ended < steps || consumer.isAlive()) {
            counted += LoadSteps.endStep(LoadSteps.currentStep()).received;
            ended++;
        }
        consumer.join();
        counted += LoadSteps.endStep(LoadSteps.currentStep()).received;
        System.out.println("{\"counted\": " + counted + ", \"total\": "
            + LoadSteps.totalReceived() + ", \"steps\": " + (ended + 1) + "}");
    }
}
