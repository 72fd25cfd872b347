package worker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/runtime/scheduler"
)

func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	cfg, err := Config{Scope: "s"}.fromLookup(lookupFrom(map[string]string{
		EnvExecutors: "16", EnvMaxProcessingRows: "12", EnvQueueProfile: "default-heavy",
		EnvStageTiming: "true", EnvHandlerDeadline: "90s", EnvGenerationProbeEvery: "-1s", EnvReconcileEvery: "2m",
		EnvClaimGather: "1ms", EnvClaimAhead: "-1", EnvClaimAheadWait: "5ms",
		EnvQuietProbeEvery: "1h", EnvQuietBackstopEvery: "8h", EnvWake: "off", EnvWakeListen: "0.0.0.0:7946", EnvWakeAdvertise: "10.0.0.5",
		EnvClaimOnPromote: "off",
	}))
	if err != nil {
		t.Fatal(err)
	}
	got := []any{cfg.Scheduler.Executors, cfg.Scheduler.MaxProcessingRows, cfg.Scheduler.Profile, cfg.StageTiming,
		cfg.Scheduler.HandlerDeadline, cfg.Controller.GenerationProbeEvery, cfg.Controller.ReconcileEvery, cfg.Scheduler.ClaimGather,
		cfg.Scheduler.ClaimAhead, cfg.Scheduler.ClaimAheadWait,
		cfg.Controller.QuietProbeEvery, cfg.Controller.QuietBackstopEvery, cfg.Wake.Off, cfg.Wake.Hub.Listen, cfg.Wake.Hub.Advertise,
		cfg.NoClaimOnPromote}
	want := []any{16, 12, scheduler.ProfileDefaultHeavy, true, 90 * time.Second, -time.Second, 2 * time.Minute, time.Millisecond,
		-1, 5 * time.Millisecond, time.Hour, 8 * time.Hour, true, "0.0.0.0:7946", "10.0.0.5", true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// Unset variables keep the code's values.
	cfg, err = Config{Scope: "s", StageTiming: true}.fromLookup(lookupFrom(nil))
	if err != nil || !cfg.StageTiming {
		t.Fatalf("%+v %v", cfg, err)
	}
}

func TestFromEnvRejectsBadValuesTogether(t *testing.T) {
	t.Parallel()
	_, err := Config{}.fromLookup(lookupFrom(map[string]string{
		EnvExecutors: "0", EnvMaxProcessingRows: "many", EnvQueueProfile: "fast",
		EnvStageTiming: "sometimes", EnvHandlerDeadline: "-5s", EnvReconcileEvery: "soon", EnvClaimGather: "briefly",
		EnvClaimAhead: "0", EnvClaimAheadWait: "-1ms",
		EnvQuietBackstopEvery: "-1s", EnvWake: "maybe", EnvWakeListen: "7946", EnvWakeAdvertise: "a b", EnvClaimOnPromote: "sometimes",
	}))
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("error %v", err)
	}
	for _, name := range []string{EnvExecutors, EnvMaxProcessingRows, EnvQueueProfile, EnvStageTiming, EnvHandlerDeadline, EnvReconcileEvery,
		EnvClaimGather, EnvClaimAhead, EnvClaimAheadWait, EnvQuietBackstopEvery, EnvWake, EnvWakeListen, EnvWakeAdvertise, EnvClaimOnPromote} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Setting == "" {
		t.Fatalf("not a *ConfigError: %v", err)
	}
}

func TestUnsafeSettingsAreReported(t *testing.T) {
	t.Parallel()
	cfg := Config{}
	cfg.Scheduler.Executors = 64
	cfg.Scheduler.MaxProcessingRows = 8
	cfg.Scheduler.HeartbeatEvery = time.Minute
	cfg.Controller.ReconcileEvery = -1
	got := cfg.Unsafe(30 * time.Second)
	if len(got) != 4 {
		t.Fatalf("unsafe %q", got)
	}
	if safe := (Config{}).Unsafe(30 * time.Second); len(safe) != 0 {
		t.Fatalf("defaults reported unsafe: %q", safe)
	}
}
