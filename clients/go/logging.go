package slidingwindow

import (
	"context"
	"log"
	"log/slog"
)

// logs is where a limiter's lines go: Options.Logger when set (structured: a message and
// attributes), else the standard log package as one line of text (warnings and errors only).
type logs struct{ l *slog.Logger }

func (g logs) enabled(level slog.Level) bool {
	if g.l == nil {
		return level >= slog.LevelWarn
	}
	return g.l.Enabled(context.Background(), level)
}

// emit logs msg with attrs on the slog logger, or text (built only then) on the log package.
func (g logs) emit(level slog.Level, text func() string, msg string, attrs ...any) {
	if !g.enabled(level) {
		return
	}
	if g.l == nil {
		if text != nil {
			log.Print(text())
		}
		return
	}
	g.l.Log(context.Background(), level, msg, attrs...)
}
