package main

// The processes a run starts: redis-server (with the module, and without it for the
// library rows) and the apps, each stopped by the run that started it.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// repoRoot is the checkout this bench sits in (the directory holding lua/slidingwindow.lua).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "lua", "slidingwindow.lua")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no repository above %s", dir)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type server struct {
	cmd  *exec.Cmd
	addr string
	rdb  *redis.Client
}

// startRedis starts redis-server ($REDIS_SERVER, else the one on PATH) on a free port,
// with the module when `module` is not "".
func startRedis(module string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	bin := os.Getenv("REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}
	if module != "" {
		args = append(args, "--loadmodule", module)
	}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	s := &server{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	s.rdb = redis.NewClient(&redis.Options{Addr: s.addr})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if s.rdb.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer", s.addr)
		}
	}
}

func (s *server) stop() {
	_ = s.rdb.Close()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// scripting commands: their time includes the commands their scripts call, which
// commandstats counts once more under their own names.
var scripting = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true,
	"fcall": true, "fcall_ro": true}

// serverUsec is the server time of the commands since the last CONFIG RESETSTAT: of the
// scripts alone when any ran (the commands inside are in their time already), else of
// every command. (An app mixing scripts and plain commands would be undercounted; none
// of the measured ones does.)
func (s *server) serverUsec() (float64, error) {
	info, err := s.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var all, scripts float64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_")), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") || name == "info" || name == "config|resetstat" {
			continue
		}
		for _, part := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(part, "usec="); ok {
				f, _ := strconv.ParseFloat(v, 64)
				all += f
				if scripting[name] {
					scripts += f
				}
			}
		}
	}
	if scripts > 0 {
		return scripts, nil
	}
	return all, nil
}

func (s *server) resetStats() error {
	return s.rdb.ConfigResetStat(context.Background()).Err()
}

type app struct {
	cmd  *exec.Cmd
	port int
}

// launcher starts the apps of one run: a command that takes `<variant> <redis addr> <limit> <window s>`, prints
// "PORT <n>" once it listens on 127.0.0.1:<n>, and answers GET / by the X-Id header.
type launcher struct{ cmd []string }

func (l launcher) start(variant, redisAddr string, limit, window int) (*app, error) {
	argv := l.cmd
	args := append(append([]string{}, argv[1:]...), variant, redisAddr, strconv.Itoa(limit), strconv.Itoa(window))
	cmd := exec.Command(argv[0], args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// The first "PORT n" line; an app may log other lines before it.
	r := bufio.NewReader(out)
	for {
		line, err := r.ReadString('\n')
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "PORT "); ok {
			port, perr := strconv.Atoi(p)
			if perr == nil {
				go func() { _, _ = io.Copy(io.Discard, r) }() // keep its stdout from filling
				return &app{cmd: cmd, port: port}, nil
			}
		}
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("%s %s did not start (last line %q)", argv[0], variant, line)
		}
	}
}

func (a *app) stop() {
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
}

// cpu is the app's user + system time so far (cputime.go).
func (a *app) cpu() time.Duration {
	return processCPU(a.cmd.Process.Pid)
}
