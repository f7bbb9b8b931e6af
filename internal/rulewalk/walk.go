// Package rulewalk visits the strings a rule holds, for the checks the
// rules package and the engine make of every name in a rule (UTF-8, length)
// whatever the rule's type.
package rulewalk

import "reflect"

// Strings calls f with every string of v and of what v holds (exported
// struct fields, pointed-to structs, list items, map keys and values), and
// the Go name of the top-level field it is in ("Exceptions" for a key of
// that map, key set). It stops at, and returns, the first error of f.
func Strings(v reflect.Value, f func(field, s string, key bool) error) error {
	return walk(v, "", f)
}

func walk(v reflect.Value, field string, f func(field, s string, key bool) error) error {
	switch v.Kind() {
	case reflect.String:
		return f(field, v.String(), false)
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return walk(v.Elem(), field, f)
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if err := walk(v.Index(i), field, f); err != nil {
				return err
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if it.Key().Kind() == reflect.String {
				if err := f(field, it.Key().String(), true); err != nil {
					return err
				}
			}
			if err := walk(it.Value(), field, f); err != nil {
				return err
			}
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			sf := v.Type().Field(i)
			if !sf.IsExported() {
				continue
			}
			name := field
			if name == "" {
				name = sf.Name
			}
			if err := walk(v.Field(i), name, f); err != nil {
				return err
			}
		}
	}
	return nil
}
