package slidingwindow

import (
	"net/http"
)

// KeyFunc names the identity a request is counted by ("" : not limited).
type KeyFunc func(r *http.Request) string

// MiddlewareOptions configures Middleware.
type MiddlewareOptions struct {
	// Key is the identity of a request; default: by peer address (KeyByIP).
	Key KeyFunc
	// Policy names the limits in the draft RateLimit headers; default "default".
	Policy string
	// CountOnlyFailures counts a request only when the handler answers with a status
	// of 400 or more (an allowed request is given back otherwise).
	CountOnlyFailures bool
	// Shadow counts and sets headers but never refuses (and never uses a deny cache).
	Shadow bool
	// NoDenyCache sends every request to Redis. By default the middleware answers the
	// refusals it has seen from a deny cache until Redis could allow again (the limiter's
	// own Options.DenyCache when it has one, else a default one of its own), as the
	// Python and Node middlewares do.
	NoDenyCache bool
	// NoHeaders leaves the rate-limit headers out.
	NoHeaders bool
	// OnLimited answers a refused request; default 429 with a short text.
	OnLimited http.Handler
	// OnError is called with an error other than an outage (which is answered by the
	// limiter's fail-open or fail-closed); the request then passes. nil: it passes.
	OnError func(r *http.Request, err error)
}

// Middleware limits every request by the call c (NewCall(...), Rates(...)).
func Middleware(l *Limiter, c Call, o MiddlewareOptions) func(http.Handler) http.Handler {
	if o.Key == nil {
		o.Key = KeyByIP()
	}
	if o.Policy == "" {
		o.Policy = "default"
	}
	if o.OnLimited == nil {
		o.OnLimited = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
		})
	}
	cache := l.cache
	if o.Shadow || o.NoDenyCache {
		cache = nil
	} else if cache == nil {
		cache = NewDefaultDenyCache()
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := o.Key(r)
			if id == "" {
				next.ServeHTTP(w, r)
				return
			}
			d, err := l.run(r.Context(), opCheck, id, c, cache)
			if err != nil {
				if o.OnError != nil {
					o.OnError(r, err)
				}
				next.ServeHTTP(w, r)
				return
			}
			if !o.NoHeaders {
				for _, h := range LimitsHeaders(d, o.Policy) {
					w.Header().Set(h.Name, h.Value)
				}
			}
			if !d.Allowed() && !o.Shadow {
				o.OnLimited.ServeHTTP(w, r)
				return
			}
			if !o.CountOnlyFailures || !d.Allowed() {
				next.ServeHTTP(w, r)
				return
			}
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r)
			if sw.status < 400 {
				_, _ = l.run(r.Context(), opRefund, id, c, cache)
			}
		})
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// KeyByIP counts by the socket's peer address (IPv6 by its /64).
func KeyByIP() KeyFunc {
	return func(r *http.Request) string {
		a, _ := ParseIP(r.RemoteAddr)
		return IPKey(a, DefaultIPv6Prefix)
	}
}

// KeyByRealIP counts by the client address behind trusted proxies (X-Forwarded-For).
func KeyByRealIP(trusted *TrustedProxies) KeyFunc {
	return func(r *http.Request) string {
		a, _ := ClientIP(r.Header, r.RemoteAddr, trusted)
		return IPKey(a, DefaultIPv6Prefix)
	}
}

// KeyByHeader counts by a header's value ("header:<name>:<value>"); a request without
// it is not limited.
func KeyByHeader(name string) KeyFunc {
	return func(r *http.Request) string {
		v := r.Header.Get(name)
		if v == "" {
			return ""
		}
		return "header:" + http.CanonicalHeaderKey(name) + ":" + v
	}
}

// LimitByIP limits requests per peer address to limit per window seconds.
func LimitByIP(l *Limiter, limit, windowSeconds uint64) func(http.Handler) http.Handler {
	return Middleware(l, NewCall(limit, windowSeconds), MiddlewareOptions{Key: KeyByIP()})
}

// LimitByRealIP limits per client address behind trusted proxies.
func LimitByRealIP(l *Limiter, trusted *TrustedProxies, limit, windowSeconds uint64) func(http.Handler) http.Handler {
	return Middleware(l, NewCall(limit, windowSeconds), MiddlewareOptions{Key: KeyByRealIP(trusted)})
}

// LimitByHeader limits per value of a header.
func LimitByHeader(l *Limiter, header string, limit, windowSeconds uint64) func(http.Handler) http.Handler {
	return Middleware(l, NewCall(limit, windowSeconds), MiddlewareOptions{Key: KeyByHeader(header)})
}

// LimitByKey limits per the identity key returns.
func LimitByKey(l *Limiter, key KeyFunc, limit, windowSeconds uint64) func(http.Handler) http.Handler {
	return Middleware(l, NewCall(limit, windowSeconds), MiddlewareOptions{Key: key})
}

// LimitRates limits per peer address by a rate string ("10/second;1000/hour"); every
// limit must allow.
func LimitRates(l *Limiter, rates string, o MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	c, err := Rates(rates)
	if err != nil {
		return nil, err
	}
	return Middleware(l, c, o), nil
}
